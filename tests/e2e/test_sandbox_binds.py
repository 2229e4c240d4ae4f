"""Pull-request files try to choose what the sandbox shows, or what ds4ci reads outside it; none may.

Each attack is a real gate (or a real bubblewrap process, also as the unprivileged user ``nobody``):
a server script whose first line names a virtual environment in the checkout, whose ``.pth`` files
name ``$HOME/..``, ``/proc`` and ``/`` (or are a FIFO, or a link to /dev/zero); a check whose report
is a link to the runner's key or a FIFO; a committed report folder that is a link out of the
checkout. The tests read the evidence and the host: the key never reaches either, and the gate
refuses or contains each attack with a message.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from gatekit import Workspace
from test_sandbox import verdicts

from ds4ci.gate import views
from ds4ci.options.sections import CheckSpec
from ds4ci.supervisor import SupervisorError, sandbox

pytestmark = pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")

KEY = "SECRET-RUNNER-KEY-ds4ci-must-hide"


def planted_home(root: Path) -> Path:
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(f"{KEY}\n")
    return home


def everything_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink())


def attempts(lines: dict[str, str]) -> str:
    """Shell that runs each ``name: command`` and prints ``ATTACK name: held`` or ``ATTACK name: ESCAPED`` (its
    output captured, not sent to /dev/null: a view that replaces /dev must not pass for a held attack)."""
    return "".join(
        f'if out=$( ( {command} ) 2>&1 ); then echo "ATTACK {name}: ESCAPED" >&2; else echo "ATTACK {name}: held" >&2; fi\n'
        for name, command in lines.items()
    )


def hole_one_attacks(home: Path, outside: Path) -> dict[str, str]:
    h = shlex.quote(str(home))
    return {
        "read-home-key-through-dotdot": f"grep -q {KEY} {h}/../home/.ssh/id_ed25519",
        "read-home-key": f"grep -q {KEY} {h}/.ssh/id_ed25519",
        # "[g]": the pattern must not match grep's own command line, which the glob may list
        "see-host-proc": "cat /proc/[0-9]*/cmdline | tr '\\000' ' ' | grep -q 'ds4ci [g]ate'",
        "see-host-root": f"test -e {shlex.quote(str(outside))}",
    }


def venv_checkout(root: Path, pth_lines: list[str], then: str) -> Path:
    """A checkout holding a virtual environment (pyvenv.cfg, a .pth naming ``pth_lines``) whose ``bin/python``
    is a shell script that runs ``then``; returns a server script whose first line names that interpreter."""
    checkout = root / "checkout"
    venv = checkout / "venv"
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    (site / "evil.pth").write_text("".join(f"{line}\n" for line in pth_lines))
    (venv / "bin").mkdir()
    interpreter = venv / "bin" / "python"
    interpreter.write_text(f"#!/bin/sh\n{then}\n")
    interpreter.chmod(0o755)
    server = checkout / "server"
    server.write_text(f"#!{interpreter}\nprint('a server written in Python')\n")
    server.chmod(0o755)
    return server


def trusting(server: Path) -> Path:
    """A trusted config that lets a server script name the checkout venv's interpreter (``gate.server_interpreters``):
    what the sandbox then shows that interpreter is what these tests check."""
    config = server.parent.parent / "trusting.toml"
    config.write_text(f'[gate]\nserver_interpreters = ["{server.parent / "venv" / "bin" / "python"}"]\n')
    return config


# --- hole 1: the server's first line and its .pth files choose no bind ----------------------------------


@pytest.mark.parametrize("line", ["{home}/../home", "/proc", "/"])
def test_a_checkout_venv_and_its_pth_lines_bind_nothing_of_the_runners(tmp_path: Path, line: str) -> None:
    """`$HOME/../<user>`, `/proc` or `/` in a checkout venv's .pth: HOME, the host's /proc and / stay unseen."""
    home = planted_home(tmp_path)
    outside = tmp_path / "only-on-the-host"
    outside.write_text("host\n")
    attacks = hole_one_attacks(home, outside)
    then = attempts(attacks) + f'shift\nexec {shlex.quote(sys.executable)} -m ds4ci.simulator "$@"'
    server = venv_checkout(tmp_path, [line.format(home=home)], then)
    ws = Workspace.create(tmp_path, server=server)
    run = ws.gate(widths="2", env=ws.env(HOME=str(home)), config=trusting(server))
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None and run.results["containment"] == "sandbox"
    (attempt,) = (ws.root / "evidence" / "runs").iterdir()
    server_log = (attempt / "servers" / "target-only" / "stderr.log").read_text()
    assert verdicts(server_log) == dict.fromkeys(attacks, "held"), server_log
    assert KEY.encode() not in everything_under(ws.root / "evidence")


def test_a_pth_that_is_a_fifo_or_dev_zero_neither_hangs_nor_breaks_the_gate(tmp_path: Path) -> None:
    then = f'shift\nexec {shlex.quote(sys.executable)} -m ds4ci.simulator "$@"'
    server = venv_checkout(tmp_path, [], then)
    site = next((server.parent / "venv" / "lib").glob("python*/site-packages"))
    os.mkfifo(site / "fifo.pth")
    (site / "zero.pth").symlink_to("/dev/zero")
    ws = Workspace.create(tmp_path, server=server)
    run = ws.gate(widths="2", timeout=120, config=trusting(server))
    assert run.code == 0, run.stdout + run.stderr
    assert "internal error" not in run.stderr.lower()


def _server_view(tmp_path: Path, server: Path | None) -> sandbox.View:
    """The server's view for a config naming ``server`` as server_bin, or ``gate.server = "simulator"`` (None)."""
    from ds4ci.options import config

    named = {"server": "simulator"} if server is None else {"server_bin": server}
    cfg = config.load(None, {**named, "target": tmp_path / "t.gguf", "target_sha256": "0" * 64,
                             "draft": tmp_path / "d.gguf", "draft_sha256": "0" * 64}, check_files=False)
    return views.server_view(cfg)


def test_a_server_binary_that_is_a_fifo_gives_no_view_and_no_hang(tmp_path: Path) -> None:
    """Nothing of the binary is read to choose the view (a real process: a FIFO would block a read)."""
    server = tmp_path / "server"
    os.mkfifo(server)
    code = ("from pathlib import Path; import sys; sys.path[:0] = ['tests', 'tests/e2e']; from ds4ci.supervisor import sandbox; "
            "from test_sandbox_binds import _server_view; "
            f"v = _server_view(Path({str(tmp_path)!r}), Path({str(server)!r})); "
            "print(any(p in v.ro for p in sandbox.python_runtime()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr


def test_only_the_trusted_simulator_setting_shows_ds4cis_environment(tmp_path: Path) -> None:
    """A script whose first line names ds4ci's own Python gets no bind from it (the PR could write that line);
    gate.server = "simulator" (the trusted config) shows ds4ci's environment read-only."""
    own = tmp_path / "own"
    own.write_text(f"#!{sys.executable}\nfrom ds4ci.simulator.main import main\n\nmain()\n")
    own.chmod(0o755)
    other = venv_checkout(tmp_path, ["/"], "exit 0")
    runtime = set(sandbox.python_runtime())
    assert not runtime & set(_server_view(tmp_path, own).ro)
    assert not runtime & set(_server_view(tmp_path, other).ro)
    assert runtime <= set(_server_view(tmp_path, None).ro)


@pytest.mark.parametrize(("named", "rule"), [
    ("{home}/../home", "would show {home} whole"),
    ("{home}/..", "would show {home} whole"),
    ("/", "never bound over"),
    ("/proc", "never bound over"),
    ("/proc/1", "never bound over"),
    ("/dev", "never bound over"),
    ("/sys", "never bound over"),
    ("/run", "never bound over"),
    ("/tmp", "never bound over"),
    ("{evidence}/runs", "lies inside {evidence}"),
    ("{checkout}/up", "{checkout}/up is a symbolic link (to ..)"),
])
def test_a_bind_is_resolved_and_refused_by_rule(tmp_path: Path, named: str, rule: str) -> None:
    home, evidence, checkout = planted_home(tmp_path), tmp_path / "evidence", tmp_path / "checkout"
    (evidence / "runs").mkdir(parents=True)
    checkout.mkdir()
    (checkout / "up").symlink_to("..")
    names = {"home": home, "evidence": evidence, "checkout": checkout, "root": tmp_path}
    policy = sandbox.Policy(homes=(home,), hidden=(evidence,))
    view = sandbox.View(ro=(Path(named.format(**names)),), trees=(checkout,))
    with pytest.raises(sandbox.BindRefused, match="refused to bind") as refused:
        sandbox.checked_binds(policy, view)
    assert rule.format(**names) in str(refused.value)


def test_a_writable_bind_inside_ds4cis_install_is_refused(tmp_path: Path) -> None:
    install = tmp_path / "install"
    install.mkdir()
    policy = sandbox.Policy(frozen=(install,))
    shown = sandbox.checked_binds(policy, sandbox.View(ro=(install,)))  # shown read-only: allowed
    assert [bind.at for bind in shown] == [install]
    sandbox.close_binds(shown)
    with pytest.raises(sandbox.BindRefused, match="ds4ci's own install"):
        sandbox.checked_binds(policy, sandbox.View(rw=(install,)))


# --- the same view built and run as root and as the unprivileged user nobody ----------------------------


@pytest.fixture(params=["root", "nobody"])
def as_user(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """(user, a scratch folder that user owns): pytest's own folders are root's alone."""
    if request.param == "nobody" and os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    root = Path(tempfile.mkdtemp(prefix="ds4ci-binds-"))
    try:
        if request.param == "nobody":
            os.chown(root, 65534, 65534)
        yield request.param, root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _become(user: str) -> None:
    if user == "nobody":
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)


def run_boxed(user: str, root: Path, view: sandbox.View, policy: sandbox.Policy, script: str) -> str:
    """``sh -c script`` under bwrap with ``view``, started as ``user``; its output (stdout and stderr)."""
    scratch = root / "scratch"
    scratch.mkdir()
    for path in (root, *root.rglob("*")):
        if user == "nobody" and not path.is_symlink():
            os.chown(path, 65534, 65534)
    read_fd, write_fd = os.pipe()
    try:
        argv = sandbox.argv(["sh", "-c", script], policy, view, scratch=scratch, cwd=None, status_fd=write_fd,
                            unprivileged=user == "nobody")
        try:
            done = subprocess.run(argv, pass_fds=(write_fd, *argv.fds), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=60, check=False, preexec_fn=lambda: _become(user),
                                  env=sandbox.environment({"PATH": sandbox.DEFAULT_PATH}))
        finally:
            argv.close()
    finally:
        os.close(write_fd)
        os.close(read_fd)
    if done.returncode != 0 and "namespace" in done.stdout.lower():
        pytest.skip(f"the kernel refuses this user's namespaces here: {done.stdout.strip()}")
    assert done.returncode == 0, done.stdout
    return done.stdout


def test_a_checkout_venv_shows_nothing_of_the_runners_to_root_or_nobody(as_user: tuple[str, Path]) -> None:
    user, root = as_user
    home = planted_home(root)
    outside = root / "only-on-the-host"
    outside.write_text("host\n")
    attacks = hole_one_attacks(home, outside)
    attacks["see-host-proc"] = f"test -d /proc/{os.getpid()}"  # this test's process: not in a fresh /proc
    server = venv_checkout(root, [f"{home}/../home", "/proc", "/"], "exit 0")
    checkout = server.parent
    view = sandbox.View(ro=(checkout,), trees=(checkout,))
    out = run_boxed(user, root, view, sandbox.Policy(homes=(home,)), attempts(attacks))
    assert verdicts(out) == dict.fromkeys(attacks, "held"), out


def test_a_report_folder_linked_out_of_the_checkout_is_refused_for_root_and_nobody(as_user: tuple[str, Path]) -> None:
    """`reports -> ..`: the check's view would bind the folder above the checkout writable; it is refused instead."""
    user, root = as_user
    home = planted_home(root)
    checkout = home / "work" / "checkout"
    checkout.mkdir(parents=True)
    (checkout / "reports").symlink_to("../..")
    spec = CheckSpec("attack", "true", "junit", checkout / "reports" / "junit.xml", 20.0, checkout)
    with pytest.raises(SupervisorError, match=r"reports is a symbolic link \(to \.\./\.\.\)"):
        run_boxed(user, root, views.check_view(spec), sandbox.Policy(homes=(home,)), "echo pwned > reports/.bashrc")
    assert not (home / ".bashrc").exists() and not (home / "junit.xml").exists()


# --- hole 3: what a check wrote is read confined ---------------------------------------------------------


def test_a_report_that_links_to_the_key_or_is_a_fifo_is_never_read(tmp_path: Path) -> None:
    home = planted_home(tmp_path)
    key = home / ".ssh" / "id_ed25519"
    checkout = tmp_path / "checkout"
    (checkout / "reports").mkdir(parents=True)
    config = tmp_path / "ds4ci.toml"
    config.write_text(
        f'[[checks]]\nname = "linked"\nparser = "junit"\nreport = "{checkout}/reports/linked.xml"\ncwd = "{checkout}"\n'
        f'command = "ln -sf {key} reports/linked.xml"\n\n'
        f'[[checks]]\nname = "fifo"\nparser = "junit"\nreport = "{checkout}/reports/fifo.xml"\ncwd = "{checkout}"\n'
        'command = "mkfifo reports/fifo.xml"\ntimeout = 20\n'
    )
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", env=ws.env(HOME=str(home)), config=config, timeout=120)
    assert run.results is not None, run.stdout + run.stderr
    linked, fifo = run.results["checks"]
    assert (linked["status"], fifo["status"]) == ("error", "error")
    assert "no JUnit report was written by this run" in linked["summary"]
    assert "its report was not read" in run.stderr and "symbolic link" in run.stderr
    assert "a FIFO" in run.stderr
    assert KEY.encode() not in everything_under(ws.root / "evidence")


def test_a_committed_report_folder_linked_to_home_is_refused_with_a_message(tmp_path: Path) -> None:
    home = planted_home(tmp_path)
    checkout = home / "work" / "checkout"
    checkout.mkdir(parents=True)
    (checkout / "reports").symlink_to("../..")
    config = tmp_path / "ds4ci.toml"
    config.write_text(
        f'[[checks]]\nname = "planter"\nparser = "junit"\nreport = "{checkout}/reports/junit.xml"\n'
        f'cwd = "{checkout}"\ncommand = "echo pwned > reports/.bashrc"\n'
    )
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", env=ws.env(HOME=str(home)), config=config, timeout=120)
    assert run.code == 3 and run.results is not None, run.stdout + run.stderr
    assert run.results["checks"] == []  # refused before any PR process started: the check never ran
    assert f"checks 'planter' report (its folder) = {checkout}/reports: {checkout}/reports is a symbolic link (to ../..)" \
        in run.stderr, run.stderr
    assert not (home / ".bashrc").exists()


def test_a_file_named_through_a_link_outside_the_checkout_is_still_shown(as_user: tuple[str, Path]) -> None:
    """A model in a cache of links (the configuration names the link): bound at its resolved place, the name a link."""
    user, root = as_user
    (root / "blobs").mkdir()
    (root / "blobs" / "abc123").write_text("GGUF weights\n")
    (root / "snapshots").mkdir()
    named = root / "snapshots" / "model.gguf"
    named.symlink_to("../blobs/abc123")
    out = run_boxed(user, root, sandbox.View(ro=(named,)), sandbox.Policy(), f"cat {shlex.quote(str(named))}")
    assert out == "GGUF weights\n"


def test_the_runners_install_and_temp_folder_are_never_shown_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A self-hosted runner's install (it holds `.runner`, `.credentials`) above the working folder, and
    $RUNNER_TEMP: a bind of either (or of a folder holding them) is refused; the checkout inside is shown."""
    runner, temp = tmp_path / "actions-runner", tmp_path / "actions-runner" / "_work" / "_temp"
    checkout = runner / "_work" / "engine" / "engine"
    checkout.mkdir(parents=True)
    temp.mkdir()
    (runner / ".credentials").write_text('{"token": "RUNNER-SECRET"}\n')
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("RUNNER_TEMP", str(temp))
    policy = sandbox.Policy(homes=views.runner_folders())
    shown = sandbox.checked_binds(policy, sandbox.View(ro=(checkout,)))
    assert [bind.at for bind in shown] == [checkout]
    sandbox.close_binds(shown)
    for shown in (runner, runner / "_work", temp, checkout / ".." / ".." / ".."):
        with pytest.raises(sandbox.BindRefused, match="would show"):
            sandbox.checked_binds(policy, sandbox.View(ro=(shown,)))
