"""Server text printed on stdout and stderr never starts a GitHub workflow command, behind any line separator."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from gatekit import DS4CI, FOREIGN_SERVER, Workspace

from ds4ci.textsafe import lines, neutralise

pytestmark = pytest.mark.e2e

# Every separator str.splitlines splits on but LF, and the runner's CR: none may reach the output.
SEPARATORS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# The server's failure line, with a workflow command behind each separator (the runner trims leading blanks).
ATTACK = (
    "[ds4-spec] verify failed\r::error file=README.md,line=1::forged by CR\u2028::stop-commands::tok2028"
    "\u2029  ::warning file=README.md::forged by 2029\x85::notice::forged by 85\v::error::forged by VT"
    "\f::error::forged by FF\x1c::error::forged by 1c\x1d::error::forged by 1d\x1e::error::forged by 1e"
)
# One of the server's commands at the start of a line (ds4ci's own annotations name the evidence, not README.md).
FORGED = re.compile(r"^\s*::(?:(?:error|warning) file=README\.md|(?:notice|error)::forged|stop-commands::tok)")


def _forged(text: str) -> list[str]:
    """The lines (as any reader splits them) that would run one of the server's workflow commands."""
    return [line for line in text.splitlines() if FORGED.match(line)]


@pytest.mark.parametrize("mode", ["actions", "plain"])
def test_a_server_log_line_never_prints_a_workflow_command(tmp_path: Path, mode: str) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    env = ws.env(FOREIGN_BEHAVIOUR="failure-line", FOREIGN_FAILURE_LINE=ATTACK, DS4CI_LOG=mode)
    done = subprocess.run([DS4CI, "gate", *ws.args(widths="2")], env=env, capture_output=True, timeout=180, check=False)
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert done.returncode == 1, out + err
    assert "forged by CR" in out, out  # the table quotes the server's line
    for name, text in (("stdout", out), ("stderr", err)):
        assert _forged(text) == [], f"{name} prints the server's workflow commands"
        assert [c for c in SEPARATORS if c in text] == [], f"{name} holds a line separator other than LF"


def test_neutralise_escapes_every_separator_and_defuses_every_double_colon() -> None:
    attack = "a\r::error file=README.md::x\u2028 ::stop-commands::t\x85b\x1bc\td\n::warning::w"
    assert neutralise(attack) == (
        "a\\x0d: :error file=README.md: :x\\u2028 : :stop-commands: :t\\x85b\\x1bc\td\n: :warning: :w"
    )
    assert lines(attack)[1] == ": :warning: :w"
    assert all(not ln.lstrip().startswith("::") for ln in neutralise(attack).splitlines())
