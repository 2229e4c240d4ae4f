"""A build that makes the server binary a link out of its tree, a link loop or no program: refused, never followed.

Each case is a real ``ds4ci gate`` with a real ``[build]`` under bubblewrap, also run as the unprivileged user
``nobody`` (the system's Python with this checkout's packages). The build points ``out/dflash_server`` at a
secret outside the tree (a key file with a unique marker, ``/etc/shadow``), directly or through a linked folder.
The gate must refuse before any server starts, and the secret must be nowhere: not in its output, results.json,
the evidence, the PR comment or the job summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import asuser
import pytest
from gatekit import DS4CI, GateRun, Workspace, sha256

from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")

MARKER = "KEY-MARKER-7f3a-ds4ci-never-follows"
NOBODY = 65534
SITE = sysconfig.get_paths()["purelib"]  # this venv's packages (ds4ci is installed editable from the checkout)


@pytest.fixture(params=asuser.USERS)
def user(request: pytest.FixtureRequest) -> str:
    return asuser.require(str(request.param))


@pytest.fixture
def root() -> Iterator[Path]:
    """A scratch folder the user owns (pytest's own folders are root's alone)."""
    with asuser.scratch("ds4ci-links-") as folder:
        yield folder


def secret_key(root: Path) -> Path:
    """The runner's key, in a folder of its own outside the checkout."""
    key = root / "keys" / "runner-key.pem"
    key.parent.mkdir()
    key.write_text(f"-----BEGIN PRIVATE KEY-----\n{MARKER}\n-----END PRIVATE KEY-----\n")
    return key


def build_config(ws: Workspace, script: str) -> Path:
    """A build in ``src`` (the folder the pull request's build writes) that runs ``script`` after ``mkdir out``."""
    (ws.root / "src").mkdir()
    (ws.root / "src" / "build.sh").write_text(f"#!/bin/sh\nset -e\nmkdir -p out\n{script}\n")
    (ws.root / "src" / "build.sh").chmod(0o755)
    config = ws.root / "ds4ci.toml"
    config.write_text('[build]\ncommand = "./build.sh"\ncwd = "src"\nserver_bin = "src/out/dflash_server"\n')
    return config


def gate(ws: Workspace, user: str, config: Path) -> GateRun:
    """``ds4ci gate`` with the build's config, as ``user`` (nobody: the system's Python, this venv's packages)."""
    if user == "root":
        return ws.gate(widths="2", server_bin=None, config=config)
    ws.checkout()
    (ws.root / "home").mkdir()
    for path in (ws.root, *ws.root.rglob("*")):
        if not path.is_symlink() and not path.is_relative_to(ws.root / "keys"):
            os.chown(path, NOBODY, NOBODY)
    program = f"import site, sys; site.addsitedir({SITE!r}); from ds4ci.cli import main; sys.argv[0] = 'ds4ci'; main()"
    # no interpreter of root's to show (nobody cannot read it): the build needs none, and no server may start
    env = {**{k: v for k, v in ws.env().items() if k != sandbox.RO_VARIABLE}, "HOME": str(ws.root / "home")}
    proc = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c", program,
         "gate", *ws.args(widths="2", server_bin=None, config=config)],
        cwd=ws.checkout(), env=env, capture_output=True, text=True, timeout=180, check=False)
    results = ws.root / "results.json"
    found = json.loads(results.read_text()) if results.is_file() else None
    return GateRun(proc.returncode, proc.stdout, proc.stderr, found, ws.root / "evidence")


def everything_said(run: GateRun) -> str:
    """Output, results.json, every evidence file, the comment and the job summary, as text."""
    said = [run.stdout, run.stderr, repr(run.results)]
    said += [p.read_bytes().decode("utf-8", errors="replace") for p in sorted(run.evidence_dir.rglob("*"))
             if p.is_file() and not p.is_symlink()]
    for found in run.evidence_dir.rglob("results.json"):
        for form in (["report"], ["report", "--format", "summary"]):
            said.append(subprocess.run([DS4CI, *form, str(found)], capture_output=True, text=True, check=False).stdout)
    return "\n".join(said)


def shadow_line() -> str:
    """The first line of /etc/shadow (what a leak would quote), or skip where it cannot be read."""
    try:
        return Path("/etc/shadow").read_text().splitlines()[0]
    except (OSError, IndexError):
        pytest.skip("no readable /etc/shadow here")


@pytest.mark.parametrize("how", ["binary", "folder"])
def test_a_built_binary_linked_to_the_runner_key_is_refused_and_the_key_is_nowhere(user: str, root: Path, how: str) -> None:
    ws = Workspace.create(root)
    key = secret_key(root)
    script = f"ln -s {key} out/dflash_server" if how == "binary" else f"rmdir out\nln -s {key.parent} out"
    if how == "folder":
        (key.parent / "dflash_server").hardlink_to(key)
    run = gate(ws, user, build_config(ws, script))
    assert run.code == 3, run.stdout + run.stderr
    shown = "out/dflash_server" if how == "binary" else "out"
    assert f"{shown} is a symbolic link (to {key if how == 'binary' else key.parent})" in run.stderr, run.stderr
    assert run.results is not None and run.results["timings"]["servers"] == []  # nothing started
    assert MARKER not in everything_said(run)


def test_a_built_binary_linked_to_etc_shadow_is_refused(root: Path) -> None:
    line = shadow_line()
    ws = Workspace.create(root)
    run = gate(ws, "root", build_config(ws, "ln -s /etc/shadow out/dflash_server"))
    assert run.code == 3, run.stdout + run.stderr
    assert "out/dflash_server is a symbolic link (to /etc/shadow)" in run.stderr
    assert line not in everything_said(run)


def test_a_built_link_loop_is_a_clear_refusal_not_an_internal_error(root: Path) -> None:
    ws = Workspace.create(root)
    run = gate(ws, "root", build_config(ws, "ln -s dflash_server out/dflash_server"))
    assert run.code == 3, run.stdout + run.stderr
    assert "out/dflash_server is a symbolic link (to dflash_server)" in run.stderr
    assert "internal error" not in run.stderr


def test_a_prebuilt_link_loop_is_a_clear_refusal(root: Path) -> None:
    ws = Workspace.create(root)
    loop = root / "dflash_server"
    loop.symlink_to(loop)
    run = ws.gate(widths="2", server_bin=loop)
    assert run.code == 2, run.stdout + run.stderr  # a flag naming no file: a usage error, before any run
    assert "internal error" not in run.stderr and str(loop) in run.stderr
    assert "a link that leads to no file (a loop" in run.stderr


def test_a_built_file_that_is_no_program_is_refused_before_it_runs_without_quoting_it(root: Path) -> None:
    """The build copies text into the binary's place (a regular file, no link): not ELF, no #!: never run."""
    ws = Workspace.create(root)
    write = f"printf '%s\\n' '-----BEGIN PRIVATE KEY-----' '{MARKER}' > out/dflash_server\nchmod +x out/dflash_server"
    run = gate(ws, "root", build_config(ws, write))
    assert run.code == 3, run.stdout + run.stderr
    assert "is not an ELF executable nor a script (#!)" in run.stderr
    assert run.results is not None and run.results["timings"]["servers"] == []
    stderr_and_results = run.stderr + run.stdout + repr(run.results)
    assert MARKER not in stderr_and_results and "BEGIN" not in stderr_and_results


def test_a_script_server_runs_only_with_an_interpreter_the_trusted_config_names(root: Path) -> None:
    ws = Workspace.create(root)
    config = root / "ds4ci.toml"
    config.write_text("[gate]\nserver_interpreters = []\n")
    refused = ws.gate(widths="2", config=config)
    assert refused.code == 3, refused.stdout + refused.stderr
    assert "a script whose #! interpreter is not one gate.server_interpreters names" in refused.stderr
    config.write_text('[gate]\nserver_interpreters = ["/bin/sh"]\n')
    allowed = ws.gate(widths="2", config=config)
    assert allowed.code == 0, allowed.stdout + allowed.stderr
    assert allowed.results is not None
    assert allowed.results["identities"]["server_bin"]["sha256"] == sha256(ws.server)
