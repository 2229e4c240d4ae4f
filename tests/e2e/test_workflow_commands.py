"""No line ds4ci prints (stdout, stderr, the job summary) holds a workflow command a pull request's text put there.

The Actions runner reads a line as a command in two forms (actions/runner, src/Runner.Common/ActionCommand.cs,
tried in this order by src/Runner.Worker/ActionCommandManager.cs): ``TryParseV2``, a line that starts with
``::`` once leading white space is trimmed, and the legacy ``TryParse``, ``##[name ...]data`` anywhere in it.
Both look their marker up with .NET's culture-sensitive string search, which skips characters that collate as
nothing; :func:`runner_reads` models all of it, independently of ds4ci's own code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import DS4CI, FOREIGN_SERVER, Workspace

from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.e2e

# The runner's registered command names (its command extensions).
REGISTERED = {"set-env", "set-output", "save-state", "add-mask", "add-path", "add-matcher", "remove-matcher",
              "debug", "warning", "error", "notice", "group", "endgroup", "echo", "stop-commands",
              "internal-set-repo-path"}
# ds4ci's own commands: annotations and groups, always at the start of a line.
OWN = {"error", "warning", "notice", "group", "endgroup"}
# Unicode Default_Ignorable_Code_Point: what a culture-sensitive comparison may skip.
SKIPPED = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                     "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8]")
# A pull request's text with a command of each form in the middle of its lines.
ATTACKS = ["text ##[warning]forged", "x ::add-mask::FAIL", "y ##[stop-commands]tok", "z ::stop-commands::tok",
           "w #\u00ad#[error]forged", "\u00a0::error::forged"]


def runner_reads(line: str) -> tuple[str, str, int] | None:
    """(command, data, column) as the runner would read ``line``, or None: no command."""
    seen = SKIPPED.sub("", line)
    trimmed = seen.lstrip()
    if trimmed.startswith("::"):
        end = trimmed.find("::", 2)
        name = trimmed[2:end].split(" ")[0] if end >= 0 else ""
        if name in REGISTERED:
            return name, trimmed[end + 2:], len(seen) - len(trimmed)
    at = seen.find("##[")
    if at >= 0 and (close := seen.find("]", at)) >= 0:
        name = seen[at + 3:close].split(" ")[0]
        if name in REGISTERED:
            return name, seen[close + 1:], at
    return None


def forged(text: str) -> list[str]:
    """The lines of ``text`` the runner reads as a command that is not ds4ci's own annotation or group, or that
    hold a ``::command::`` past their start: stricter than the runner, which reads that form only at the start,
    as a reader that splits the line anywhere before it (or a log viewer's wrap) would start one."""
    out = []
    for line in text.split("\n"):
        read = runner_reads(line)
        own = read is not None and read[0] in OWN and read[2] == 0 and line.startswith("::")
        rest = SKIPPED.sub("", line)[line.find("::", 2) if own else 0:]
        if (read is not None and not own) or any(runner_reads(rest[at:]) for at in range(len(rest)) if rest[at] == ":"):
            out.append(line)
    return out


def test_the_model_reads_each_attack_as_a_command() -> None:
    """The check below would see each attack printed as is (so a pass means ds4ci broke them)."""
    assert [line for line in ATTACKS if not forged(line)] == []
    assert forged("::error file=a.c,line=1::the build failed") == []


def _build(ws: Workspace) -> Path:
    (ws.root / "attacks.txt").write_text("\n".join(ATTACKS) + "\n", encoding="utf-8")
    script = ws.root / "build.sh"
    script.write_text("#!/bin/sh\ncat attacks.txt\ncat attacks.txt >&2\nexit 1\n", encoding="utf-8")
    script.chmod(0o755)
    config = ws.root / "ds4ci.toml"
    config.write_text('[build]\ncommand = "./build.sh"\ncwd = "."\ntimeout = 60\nserver_bin = "out/dflash_server"\n')
    return config


def _actions_env(ws: Workspace, summary: Path, **extra: str) -> dict[str, str]:
    return ws.env(DS4CI_LOG="actions", GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary), **extra)


def _assert_clean(done: subprocess.CompletedProcess[str], summary: Path) -> None:
    for name, text in (("stdout", done.stdout), ("stderr", done.stderr), ("summary", summary.read_text("utf-8"))):
        assert forged(text) == [], f"{name} prints a workflow command the build wrote:\n{text}"


def test_a_build_that_prints_commands_mid_line_forges_none(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    summary = tmp_path / "summary.md"
    config = _build(ws)
    for extra in ((), ("--json",)):
        done = subprocess.run([DS4CI, "gate", *ws.args(widths="2", server_bin=None, config=config), *extra],
                              cwd=ws.checkout(), env=_actions_env(ws, summary), capture_output=True, text=True,
                              timeout=180, check=False)
        assert done.returncode == 1, done.stdout + done.stderr
        _assert_clean(done, summary)
        if not extra:
            assert "w #\u00ad# [error]forged" in done.stdout, done.stdout  # the reason quoted, readable, defused
        else:  # the JSON summary reads back unchanged: escapes, not edits
            assert "z ::stop-commands::tok" in json.dumps(json.loads(done.stdout)["reasons"], ensure_ascii=False)
    assert "# [error]forged" in summary.read_text("utf-8")
    report = subprocess.run([DS4CI, "report", "--format", "summary", str(ws.root / "evidence")],
                            capture_output=True, text=True, check=False, timeout=60)
    assert forged(report.stdout + report.stderr) == []


@pytest.mark.parametrize("mode", ["actions", "plain"])
def test_a_server_failure_line_with_commands_mid_line_forges_none(tmp_path: Path, mode: str) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    summary = tmp_path / "summary.md"
    summary.write_text("", encoding="utf-8")
    said = "[ds4-spec] verify failed " + " | ".join(ATTACKS)
    env = _actions_env(ws, summary, FOREIGN_BEHAVIOUR="failure-line", FOREIGN_FAILURE_LINE=said)
    env["DS4CI_LOG"] = mode
    done = subprocess.run([DS4CI, "gate", *ws.args(widths="2")], cwd=ws.checkout(), env=env, capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "forged" in done.stdout, done.stdout  # the table quotes the server's line
    _assert_clean(done, summary)


def test_python_printing_through_the_cli_streams_is_neutralised(tmp_path: Path) -> None:
    """Whatever part of ds4ci prints, by ``print`` or the logger, in pieces or whole: each line is defused, and
    the logger's own annotation still reads as one."""
    code = ("import sys\nfrom ds4ci.textsafe import guard_output\nfrom ds4ci.log import Logger\n"
            "guard_output()\n"
            "sys.stdout.write('a #'); sys.stdout.flush(); sys.stdout.write('#[warning]forged\\n')\n"
            "print('b :', end=''); print(':add-mask::FAIL', file=sys.stdout)\n"
            "Logger('actions', sys.stderr).error('quoted ##[stop-commands]tok')\n"
            "print('no newline ::stop-commands::tok', end='')\n"
            "raise SystemExit(0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout == "a ## [warning]forged\nb : :add-mask: :FAIL\nno newline : :stop-commands: :tok"
    assert done.stderr == "::error::quoted ## [stop-commands]tok\n"
    assert forged(done.stdout + "\n" + done.stderr) == []


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox: {sandbox.refusal()}")
def test_a_commit_subject_with_commands_forges_none_in_a_bisect(tmp_path: Path) -> None:
    """A bisect prints and summarises commit subjects, which the pull request's author wrote."""
    from test_bisect import _git, tiny_project

    ws = Workspace.create(tmp_path / "files")
    good = tiny_project(tmp_path, ws)[0]
    repo = tmp_path / "engine"
    _git(repo, "reset", "-q", "--hard", good)
    (repo / "faults.txt").write_text("leak-fused-verify")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", " | ".join(ATTACKS))
    summary = tmp_path / "summary.md"
    trusted = tmp_path / "trusted" / "ds4ci.toml"  # under Actions bisect takes its settings from outside the checkout
    trusted.parent.mkdir()
    trusted.write_bytes((repo / "ds4ci.toml").read_bytes())
    for extra in ((), ("--json",)):
        done = subprocess.run([DS4CI, "bisect", "--config", str(trusted), "--config-base", ".", "--good", good,
                               "--runner", "box", *extra], cwd=repo,
                              env={**_actions_env(ws, summary), "DS4CI_CONTAINMENT": "sandbox"},
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        _assert_clean(done, summary)
        if extra:
            assert json.loads(done.stdout)["first_failing"]["subject"] == " | ".join(ATTACKS)  # read back unchanged
        else:
            assert "## [warning]forged" in done.stdout, done.stdout
    assert "warning&#93;forged" in summary.read_text("utf-8")  # the summary's Markdown quotes it escaped
