"""ds4ci.supervisor with real processes, in both containment paths: nothing a command starts survives.

Processes are found from the host with psutil, by a unique marker in their argv or environment
and by the tracking token (pids the command prints are namespace pids in the namespace path).
Tests that need a PID namespace skip, with the kernel's reason, only where it refuses one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from paths import ROOT, TESTS
from procscan import (
    MARKER_VARIABLE,
    carrying,
    describe,
    marked,
    namespace_refusal,
    new_marker,
    supervisor_or_skip,
    wait_unmarked,
)

from ds4ci.supervisor import (
    FALLBACK,
    NAMESPACE,
    STDOUT,
    TOKEN_VARIABLE,
    Supervisor,
    SupervisorError,
    procs,
    sweep_stale,
    tcp_listeners,
)
from ds4ci.supervisor.child import SHIM

REPO = ROOT
MODES = ["pid-namespace", "subreaper"]
HELD = {"pid-namespace": NAMESPACE, "subreaper": FALLBACK}

# Double fork + setsid: leaves the command's process group and session; ignores SIGTERM and SIGHUP.
DAEMON = """
import os, signal, sys, time
if os.fork():
    os._exit(0)
os.setsid()
middle = os.getpid()
if os.fork():
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
while os.getppid() == middle:  # "up" once the forks in between are gone: only the daemon is left of it
    time.sleep(0.005)
open(sys.argv[2], "w").write("up")
while True:
    time.sleep(1)
"""

# Writes which signal reached it (after argv[4] seconds, if given), then exits 42.
TERM_AWARE = """
import signal, sys, time
def on_term(signum, frame):
    time.sleep(float(sys.argv[4]) if len(sys.argv) > 4 else 0)
    open(sys.argv[2], "w").write("TERM")
    sys.exit(42)
signal.signal(signal.SIGTERM, on_term)
open(sys.argv[3], "w").write("up")
while True:
    time.sleep(0.05)
"""


@pytest.fixture(params=MODES)
def sup(request: pytest.FixtureRequest) -> Supervisor:
    return supervisor_or_skip(request.param)


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    value = new_marker()
    monkeypatch.setenv(MARKER_VARIABLE, value)
    yield value
    for proc in marked(value):  # never leave anything behind, even when a test fails
        with contextlib.suppress(psutil.Error):
            proc.kill()


def wait_for(path: Path, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def leaky_command(tmp: Path, marker: str, then: str = "exit 0") -> list[str]:
    """A shell that starts a setsid daemon and a SIGTERM-ignoring helper, waits until both run, then ``then``."""
    daemon = tmp / "daemon.py"
    daemon.write_text(DAEMON)
    d_up, h_up = tmp / "daemon.up", tmp / "helper.up"
    script = (
        f"{sys.executable} {daemon} {marker} {d_up}; "
        f"sh -c 'trap \"\" TERM; echo up > {h_up}; while :; do sleep 1000; done' {marker} & "
        f"while [ ! -e {d_up} ] || [ ! -e {h_up} ]; do sleep 0.02; done; echo ready; {then}"
    )
    return ["sh", "-c", script, marker]


# --- exit status and signals -------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "code"),
    [("exit 0", 0), ("exit 7", 7), ("exit 255", 255), ("kill -TERM $$", -15), ("kill -KILL $$", -9), ("kill -SEGV $$", -11)],
)
def test_exit_status_is_preserved(sup: Supervisor, script: str, code: int) -> None:
    result = sup.run(["sh", "-c", script], 60)
    assert (result.returncode, result.timed_out, result.needed_kill) == (code, False, False)


def test_sigterm_reaches_the_command_and_its_helpers(sup: Supervisor, tmp_path: Path) -> None:
    prog = tmp_path / "term.py"
    prog.write_text(TERM_AWARE)
    main, helper = tmp_path / "main.sig", tmp_path / "helper.sig"
    script = (
        f"{sys.executable} {prog} x {helper} {tmp_path / 'helper.up'} 1.0 & "  # a helper slow to stop
        f"exec {sys.executable} {prog} x {main} {tmp_path / 'main.up'}"
    )
    child = sup.spawn(["sh", "-c", script])
    try:
        wait_for(tmp_path / "main.up")
        wait_for(tmp_path / "helper.up")
        assert child.poll() is None
        assert child.terminate(grace_s=60) is False  # it stopped by itself: no SIGKILL needed
        assert child.returncode == 42
    finally:
        child.sweep()
    assert main.read_text() == "TERM"
    # The helper in its group / namespace got SIGTERM too, and the rest of the grace to act on it.
    assert helper.read_text() == "TERM"


def test_terminate_kills_a_command_that_ignores_sigterm(sup: Supervisor, marker: str, tmp_path: Path) -> None:
    up = tmp_path / "up"
    child = sup.spawn(["sh", "-c", f"trap '' TERM; echo > {up}; while :; do sleep 0.05; done", marker])
    try:
        wait_for(up)
        assert child.terminate(grace_s=0.5) is True
        assert child.returncode == -signal.SIGKILL
    finally:
        child.sweep()
    assert not wait_unmarked(marker)


def test_kill_names_a_process_forked_after_it_first_listed_the_tree(
    sup: Supervisor, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork between the listing and the SIGKILLs is named too (in a namespace it would die unnamed with the init)."""
    child = sup.spawn(["bash", "-c", "trap '' TERM; while :; do sleep 300 & sleep 0.05; done", marker])
    listed = procs.descendants
    late: list[int] = []

    def helper(proc: psutil.Process) -> bool:
        with contextlib.suppress(psutil.Error):
            return proc.cmdline() == ["sleep", "300"]
        return False

    def racing(pid: int) -> list[psutil.Process]:
        """The first listing, handed back only once the command has started another long-lived helper since."""
        found = listed(pid)
        known = {p.pid for p in found}
        deadline = time.monotonic() + 30
        while not late:
            assert time.monotonic() < deadline, "the command started no new helper"
            late.extend(p.pid for p in listed(pid) if p.pid not in known and helper(p))
            time.sleep(0.01)
        return found

    try:
        with monkeypatch.context() as patch:
            patch.setattr(procs, "descendants", racing)
            child.kill()
        assert late[0] in {k.pid for k in child.killed}, (late, child.killed)
    finally:
        child.sweep()
    assert not wait_unmarked(marker)


def test_timeout_terminates_then_kills(sup: Supervisor) -> None:
    polite = sup.run(["sleep", "1000"], 0.5, grace_s=60)
    assert (polite.timed_out, polite.needed_kill, polite.returncode) == (True, False, -signal.SIGTERM)
    # (sh runs its first command, the trap, long before the deadline)
    stubborn = sup.run(["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"], 2.0, grace_s=0.5)
    assert (stubborn.timed_out, stubborn.needed_kill, stubborn.returncode) == (True, True, -signal.SIGKILL)
    assert polite.containment == stubborn.containment == sup.containment


# --- nothing is left behind ----------------------------------------------------------------


def test_daemon_and_sigterm_ignoring_helper_leave_nothing_behind(sup: Supervisor, tmp_path: Path, marker: str) -> None:
    child = sup.spawn(leaky_command(tmp_path, marker), stdout=tmp_path / "out.log")
    assert child.wait(60) == 0
    # The command is gone, but what it started still runs, outside its group and session.
    left = [p for p in marked(marker) if p.pid not in child.keepers]
    assert len(left) >= 2, describe(left)
    assert all(child.owns(p.pid) for p in left), describe(left)
    assert all(p.environ().get(TOKEN_VARIABLE) == child.token for p in left)
    killed = child.sweep()
    assert {p.pid for p in left} <= {k.pid for k in killed}, (describe(left), killed)
    assert any(marker in k.cmdline and "daemon.py" in k.cmdline for k in killed), killed
    assert not marked(marker), describe(marked(marker))
    assert not carrying(TOKEN_VARIABLE, child.token)
    assert (tmp_path / "out.log").read_text() == "ready\n"


def test_run_always_sweeps(sup: Supervisor, tmp_path: Path, marker: str) -> None:
    result = sup.run(leaky_command(tmp_path, marker), 60)
    assert (result.returncode, result.timed_out, result.abandoned) == (0, False, False)
    assert len(result.killed) >= 2 and all(k.reason in ("descendant", "token") for k in result.killed)
    assert not marked(marker), describe(marked(marker))


def test_leaving_the_context_stops_and_sweeps(sup: Supervisor, tmp_path: Path, marker: str) -> None:
    with sup.spawn(leaky_command(tmp_path, marker, then="sleep 1000")) as child:
        wait_for(tmp_path / "helper.up")
        assert child.poll() is None
    assert child.returncode == -signal.SIGTERM
    assert not marked(marker), describe(marked(marker))


def test_a_keeper_killed_from_outside_still_leaves_nothing(sup: Supervisor, tmp_path: Path, marker: str) -> None:
    child = sup.spawn(leaky_command(tmp_path, marker, then="sleep 1000"))
    wait_for(tmp_path / "daemon.up")
    os.kill(child.keeper_pid, signal.SIGKILL)
    assert child.wait(60) == -signal.SIGKILL  # the command dies with its keeper (namespace or death signal)
    killed = child.sweep()
    if child.containment == FALLBACK:
        # The orphans left the keeper's tree when it died; the token still finds them.
        assert any("daemon.py" in k.cmdline and k.reason == "token" for k in killed), killed
    left = wait_unmarked(marker)
    assert not left, describe(left)


PARENT = """
import sys, time
from ds4ci.supervisor import Supervisor
sup = Supervisor(sys.argv[1], sweep_stale=False)
child = sup.spawn(sys.argv[3:])
while not __import__("os").path.exists(sys.argv[2]):
    time.sleep(0.02)
print(child.containment, child.pid, child.keeper_pid, child.token, flush=True)
time.sleep(3600)
"""


def start_parent(mode: str, tmp: Path, marker: str) -> tuple[subprocess.Popen[str], str, tuple[int, int], str]:
    """A Python process that supervises a leaky command; returns it once everything runs."""
    argv = [sys.executable, "-c", PARENT, mode, str(tmp / "helper.up"), *leaky_command(tmp, marker, then="sleep 1000")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    line = parent.stdout.readline().split()
    assert len(line) == 4, f"parent said {line}"
    wait_for(tmp / "daemon.up")
    return parent, line[0], (int(line[1]), int(line[2])), line[3]


def kill_parent(parent: subprocess.Popen[str]) -> None:
    parent.send_signal(signal.SIGKILL)
    parent.wait()


def test_kill_9_of_ds4ci_takes_everything_down_in_the_namespace_path(tmp_path: Path, marker: str) -> None:
    supervisor_or_skip("pid-namespace")
    parent, held, _pids, token = start_parent("pid-namespace", tmp_path, marker)
    assert held == NAMESPACE
    before = marked(marker)
    assert len(before) >= 4, describe(before)  # command, daemon, helper, their sleeps
    kill_parent(parent)
    left = wait_unmarked(marker)  # the kernel's namespace teardown; waits, asserts no speed
    assert not left, describe(left)
    assert not carrying(TOKEN_VARIABLE, token)


def run_isolated(scenario: str, tmp: Path, marker: str, *extra: str) -> dict[str, Any]:
    """Run a tests/stale_scenarios.py scenario, in a PID namespace of its own where the kernel allows.

    Any ds4ci starting elsewhere on this machine sweeps leftovers of dead owners as well (by
    design), which would race this test; tokens from another PID namespace it leaves alone.
    """
    argv = [sys.executable, str(TESTS / "stale_scenarios.py"), scenario, str(tmp), marker, *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out, err = tmp / f"{scenario}.json", tmp / f"{scenario}.err"
    if namespace_refusal() is None:
        result = Supervisor("pid-namespace", sweep_stale=False).run(argv, 300, env=env, stdout=out, stderr=err)
        code = result.returncode
    else:
        with out.open("wb") as fh, err.open("wb") as eh:
            code = subprocess.run(argv, env=env, stdout=fh, stderr=eh, timeout=300, check=False).returncode
    assert code == 0, err.read_text()
    answer: dict[str, Any] = json.loads(out.read_text())
    return answer


def test_kill_9_of_ds4ci_in_the_fallback_path_leaves_only_what_the_next_start_sweeps(tmp_path: Path, marker: str) -> None:
    # Killed once the command waits in its last `sleep` (nothing of it still forking or exiting by itself).
    ready = tmp_path / "command.ready"
    seen = run_isolated("fallback-kill9", tmp_path, marker, *leaky_command(tmp_path, marker, then=f"touch {ready}; sleep 1000"))
    assert seen["held"] == FALLBACK
    # What the fallback guarantees at once: the keeper and the command die (death signals).
    assert seen["keeper_dead"] and seen["command_dead"]
    # What it cannot: the double-forked daemon and the helper outlive ds4ci ...
    assert any("daemon.py" in cmdline for cmdline in seen["survivors"].values()), seen
    assert seen["survivor_tokens"] == [seen["token"]]
    # ... until the next ds4ci starts: their owner is dead, so their token marks them as stale.
    assert set(seen["survivors"]) <= set(seen["killed"]), seen
    assert set(seen["killed"].values()) == {"stale run"}
    assert seen["left"] == []


def test_stale_sweep_judges_owners_by_namespace_pid_and_start_time(tmp_path: Path, marker: str) -> None:
    seen = run_isolated("tokens", tmp_path, marker)
    assert seen["killed"] == seen["gone"] == ["reused pid"]
    assert seen["alive"] == ["live owner", "not ours", "other namespace"]


def running(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``argv`` started with ``env``, returned once it runs its own program (so no longer inside exec)."""
    proc = subprocess.Popen(argv, env=env)
    deadline = time.monotonic() + 30
    while psutil.Process(proc.pid).cmdline() != argv:
        assert time.monotonic() < deadline, f"{argv} never ran"
        time.sleep(0.01)
    return proc


def test_a_token_holder_caught_inside_exec_is_looked_at_again(marker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside exec a process's environment reads empty until the kernel has put the new one in place: a scan that
    read it then would pass over a holder of the token (the sweeps' last pass would leave it running)."""
    token = f"v1:0:0:0.00:{marker}"
    holder = running(["sleep", "1000"], {**os.environ, TOKEN_VARIABLE: token})
    try:
        caught: list[int] = []  # reads of the holder's environment made "inside exec"
        environ = psutil.Process.environ

        def read(proc: psutil.Process) -> dict[str, str]:
            if proc.pid == holder.pid and len(caught) < 3:
                caught.append(proc.pid)
                return {}
            return environ(proc)

        monkeypatch.setattr(psutil.Process, "environ", read)
        monkeypatch.setattr(procs, "_in_exec", lambda pid: pid == holder.pid and len(caught) < 3)
        assert [p.pid for p in procs.token_holders(token)] == [holder.pid]
        assert len(caught) == 3
    finally:
        holder.kill()
        holder.wait()


def kernel_threads() -> list[int]:
    """Pids of kernel threads (kthreadd, pid 2, and its children), where this PID namespace shows them."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid == 2 or proc.ppid() == 2:
                found.append(proc.pid)
    return found


def test_an_empty_environment_is_not_taken_for_one_inside_exec() -> None:
    """A process started with no environment at all, a kernel thread, this process: none is waited on as inside exec."""
    bare = running(["sleep", "1000"], {})
    try:
        assert psutil.Process(bare.pid).environ() == {}
        assert not procs._in_exec(bare.pid)
        assert not procs._in_exec(os.getpid())
        assert not any(procs._in_exec(pid) for pid in kernel_threads())
    finally:
        bare.kill()
        bare.wait()


def test_stale_sweep_spares_processes_of_a_running_owner(sup: Supervisor, marker: str) -> None:
    child = sup.spawn(["sh", "-c", "sleep 1000 & wait", marker])
    try:
        deadline = time.monotonic() + 30
        while len(ours := [p for p in marked(marker) if p.pid not in child.keepers]) < 2:
            assert time.monotonic() < deadline, describe(ours)
            time.sleep(0.02)
        assert not {k.pid for k in sweep_stale()} & {p.pid for p in ours}
        assert child.poll() is None and all(p.is_running() for p in ours)
    finally:
        child.sweep()


# --- identity: pids, ownership, token, listeners ---------------------------------------------


def test_pid_is_the_host_pid_and_owns_tells_ours_from_strangers(sup: Supervisor, marker: str) -> None:
    child = sup.spawn(["sh", "-c", "sleep 1001 & wait", marker])
    stranger = subprocess.Popen(["sleep", "1002"])
    try:
        assert marker in " ".join(psutil.Process(child.pid).cmdline())
        deadline = time.monotonic() + 30
        while not (kids := psutil.Process(child.pid).children()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert child.owns(child.pid) and all(child.owns(k.pid) for k in kids)
        assert not child.owns(os.getpid())
        assert not child.owns(stranger.pid)
        assert not child.owns(child.keeper_pid)  # the keeper is ours, but it is not the command
    finally:
        stranger.kill()
        stranger.wait()
        child.sweep()


def test_token_is_set_per_child_and_cannot_be_inherited(sup: Supervisor, tmp_path: Path) -> None:
    env = {**os.environ, TOKEN_VARIABLE: "forged"}
    outs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    tokens = []
    for out in outs:
        child = sup.spawn(["sh", "-c", f'echo "${TOKEN_VARIABLE}"'], env=env, stdout=out)
        assert child.wait(60) == 0
        child.sweep()
        tokens.append(child.token)
    assert [out.read_text().strip() for out in outs] == tokens
    assert len(set(tokens)) == 2 and "forged" not in tokens


def test_listener_on_the_port_is_found_and_owned(sup: Supervisor, tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    code = (
        "import os, socket, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        f"open({str(port_file)!r} + '.tmp', 'w').write(str(s.getsockname()[1]))\n"
        f"os.rename({str(port_file)!r} + '.tmp', {str(port_file)!r})\n"
        "time.sleep(1000)\n"
    )
    child = sup.spawn([sys.executable, "-c", code])
    try:
        wait_for(port_file)
        port = int(port_file.read_text())
        found = tcp_listeners(port)
        assert found.pids == {child.pid} and found.unidentified == 0
        assert all(child.owns(pid) for pid in found.pids)
    finally:
        child.sweep()
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        found = tcp_listeners(port)
        assert found.pids == {os.getpid()}
        assert not child.owns(os.getpid())


def test_namespace_path_gives_the_command_its_own_pids_and_proc(tmp_path: Path) -> None:
    sup = supervisor_or_skip("pid-namespace")
    out = tmp_path / "out.txt"
    code = "import os; print(os.getpid(), sorted(int(d) for d in os.listdir('/proc') if d.isdigit()))"
    child = sup.spawn([sys.executable, "-c", code], stdout=out)
    assert child.wait(60) == 0
    child.sweep()
    if any("no private /proc" in note for note in child.notes):
        pytest.skip(f"no private /proc here: {child.notes}")
    pid, _, visible = out.read_text().partition(" ")
    assert pid == "2"  # pid 1 is the keeper, the namespace's init
    assert visible.strip() == "[1, 2]"
    assert child.pid not in (1, 2) and child.pid != os.getpid()


# --- configuration and start errors ------------------------------------------------------------


def test_containment_can_be_forced_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS4CI_CONTAINMENT", "subreaper")
    sup = Supervisor(sweep_stale=False)
    assert sup.containment is None
    result = sup.run(["true"], 60)
    assert result.containment == sup.containment == FALLBACK
    monkeypatch.setenv("DS4CI_CONTAINMENT", "chroot")
    expected = r"DS4CI_CONTAINMENT must be one of auto, sandbox, pid-namespace, subreaper; found 'chroot'"
    with pytest.raises(SupervisorError, match=expected):
        sup.run(["true"], 60)
    with pytest.raises(SupervisorError, match=r"containment must be one of .*; found 'namespace'"):
        Supervisor("namespace")


def test_auto_takes_the_namespace_where_the_kernel_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DS4CI_CONTAINMENT", raising=False)
    sup = Supervisor(sweep_stale=False)
    child = sup.spawn(["true"])
    child.wait(60)
    child.sweep()
    refusal = namespace_refusal()
    assert child.containment == (FALLBACK if refusal else NAMESPACE)
    if refusal:
        assert any("refused a PID namespace" in note for note in child.notes)
    assert sup.containment == child.containment


@pytest.mark.parametrize("mode", MODES)
def test_start_errors_are_raised_as_oserror(mode: str, tmp_path: Path) -> None:
    sup = supervisor_or_skip(mode)
    with pytest.raises(FileNotFoundError) as missing:
        sup.spawn(["no-such-command-for-ds4ci"])
    assert missing.value.filename == "no-such-command-for-ds4ci"
    with pytest.raises(FileNotFoundError) as nowhere:
        sup.run(["true"], 60, cwd=tmp_path / "absent")
    assert nowhere.value.filename == str(tmp_path / "absent")
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    with pytest.raises(PermissionError):
        sup.spawn([str(plain)])
    with pytest.raises(ValueError, match="empty argv"):
        sup.spawn([])


def test_output_goes_to_files_and_cwd_is_used(sup: Supervisor, tmp_path: Path) -> None:
    (tmp_path / "here.txt").write_text("here\n")
    merged = tmp_path / "merged.log"
    sup.run(["sh", "-c", "cat here.txt; echo err >&2"], 60, cwd=tmp_path, stdout=merged, stderr=STDOUT)
    assert merged.read_text() == "here\nerr\n"
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        sup.run(["sh", "-c", "echo o; echo e >&2"], 60, stdout=out, stderr=err)
    assert ((tmp_path / "out").read_text(), (tmp_path / "err").read_text()) == ("o\n", "e\n")


def test_an_unprivileged_user_gets_a_namespace_through_a_user_namespace(tmp_path: Path) -> None:
    python = Path("/usr/bin/python3")
    if os.geteuid() != 0 or not python.exists():
        pytest.skip("needs root (to become an unprivileged user) and /usr/bin/python3")
    shared = Path(tempfile.mkdtemp(prefix="ds4ci-unprivileged-"))  # pytest's tmp_path is root-only
    shared.chmod(0o777)
    out = shared / "id.txt"
    read_fd, write_fd = os.pipe()
    argv = [str(python), "-I", "-S", str(SHIM), str(write_fd), "auto", str(os.getpid()), "/", "--",
            "sh", "-c", f"id -u > {out}; exit 5"]
    try:
        with subprocess.Popen(argv, user=65534, group=65534, extra_groups=[], pass_fds=(write_fd,), cwd="/") as keeper:
            os.close(write_fd)
            with os.fdopen(read_fd, "rb") as report:
                lines = report.read().decode().splitlines()
        uid = out.read_text().strip() if out.exists() else ""
    finally:
        shutil.rmtree(shared)
    assert keeper.returncode == 0, lines
    if "mode subreaper+sweep" in lines:
        pytest.skip(f"this kernel refuses unprivileged user namespaces: {lines}")
    assert lines[0] == "mode pid-namespace"
    assert any(line.startswith("note unprivileged") for line in lines), lines
    assert "started" in lines and lines[-1] == "exit 5"
    assert uid == "65534"  # its own uid, mapped to itself
