"""A build that writes the checkout's ``.git``: nothing it plants runs outside the sandbox, and the
revisions recorded are the commit that was checked out, not one the build names.

The build is a real shell script run by a real gate (sandboxed where bwrap runs here, and at the
pid-namespace level, where PR code can write what the runner's user can); the checkout is a real git
repository. The build tries to plant a ``core.fsmonitor`` program, a hook, a clean filter, and to point
``.git/HEAD`` at another commit; the program, if git ever ran it, would create a marker file that no
sandboxed process can reach.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import Workspace, git_repo
from procscan import namespace_refusal

from ds4ci.supervisor import sandbox

LEVELS = [
    pytest.param("auto", marks=pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox: {sandbox.refusal()}")),
    pytest.param("pid-namespace", marks=pytest.mark.skipif(namespace_refusal() is not None, reason="no PID namespace")),
]


def planting_build(ws: Workspace, marker: Path, other_commit: str) -> Path:
    """ds4ci.toml with a [build] that plants programs in .git, rewrites HEAD, then builds the simulator wrapper."""
    program = f"#!/bin/sh\\necho ran >> {shlex.quote(str(marker))}\\ncat\\n"
    script = ws.root / "build.sh"
    script.write_text("\n".join([
        "#!/bin/sh",
        f"printf '{program}' > planted.sh && chmod +x planted.sh",
        'git config core.fsmonitor "$PWD/planted.sh" || echo "PLANT fsmonitor: refused"',
        'git config core.hooksPath "$PWD" || echo "PLANT hooksPath: refused"',
        'git config filter.evil.clean "$PWD/planted.sh" || echo "PLANT filter: refused"',
        "echo '* filter=evil' > .gitattributes",
        "touch README",  # stat-dirty: a git status would run the clean filter on it
        f'echo {other_commit} > .git/HEAD || echo "PLANT HEAD: refused"',
        "mkdir -p out",
        f"printf '#!/bin/sh\\nexec \"%s\" -m ds4ci.simulator \"$@\"\\n' '{sys.executable}' > out/dflash_server",
        "chmod +x out/dflash_server",
    ]) + "\n")
    script.chmod(0o755)
    config = ws.root / "ds4ci.toml"
    config.write_text('[build]\ncommand = "./build.sh"\ncwd = "."\ntimeout = 120\nserver_bin = "out/dflash_server"\n')
    return config


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("level", LEVELS)
def test_a_build_that_plants_programs_in_git_and_rewrites_head_changes_nothing_the_gate_records(
    tmp_path: Path, level: str
) -> None:
    checkout, marker = tmp_path / "checkout", tmp_path / "ran-outside-the-sandbox"
    head = git_repo(checkout, {"README": "the server source\n", ".gitignore": "ds4ci-evidence/\n"})
    _git(checkout, "commit", "-q", "--allow-empty", "-m", "a commit that was never built")
    other = _git(checkout, "rev-parse", "HEAD")
    _git(checkout, "reset", "-q", "--hard", head)
    ws = Workspace.create(checkout)
    config_before = (checkout / ".git" / "config").read_bytes()
    run = ws.gate(widths="2", server_bin=None, config=planting_build(ws, marker, other), source_dir=checkout,
                  env=ws.env(DS4CI_CONTAINMENT=level),
                  results_out=str(tmp_path / "results.json"))  # ds4ci's own output: never inside the checkout
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    assert not marker.exists(), marker.read_text()  # no program the build planted ever ran outside
    assert run.results["revisions"]["head"]["sha"] == head  # recorded before the build, not the planted HEAD
    assert run.results["revisions"]["head"]["subject"] == "commit"
    log = (Path(run.results["evidence"]["dir"]) / "build" / "build.log").read_text()
    if run.results["containment"] == "sandbox":  # the build saw .git read-only: nothing was planted at all
        for what in ("fsmonitor", "hooksPath", "filter", "HEAD"):
            assert f"PLANT {what}: refused" in log, log
        assert (checkout / ".git" / "config").read_bytes() == config_before
        assert _git(checkout, "rev-parse", "HEAD") == head
    else:  # at the lower levels the build could write .git: the revisions were recorded first all the same
        assert level == "pid-namespace" and "PLANT" not in log, log
        assert _git(checkout, "-c", "core.fsmonitor=false", "rev-parse", "HEAD") == other
