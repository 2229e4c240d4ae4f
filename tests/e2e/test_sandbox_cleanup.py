"""What a sandboxed command leaves is removed: its scratch folder even after PR code took its permissions away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from gatekit import processes_mentioning

from ds4ci.supervisor import sandbox
from ds4ci.supervisor.watchdog import remove_scratch

pytestmark = pytest.mark.e2e

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by nobody, unlike a venv under /root


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _unprivileged(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The system's ``python3 -I -c code args`` (stdlib only) as `nobody` when we are root, else as we are."""
    return subprocess.run(
        [SYSTEM_PYTHON if os.geteuid() == 0 else sys.executable, "-I", "-c", code, *args], capture_output=True,
        text=True, timeout=120, check=False, preexec_fn=_as_nobody if os.geteuid() == 0 else None,
    )


def _remove_unprivileged(root: Path) -> int:
    """``remove_scratch(root)`` run in a forked child as `nobody` when we are root (else in one as we are)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            if os.geteuid() == 0:
                _as_nobody()
            remove_scratch(root)
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _owned_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="ds4ci-cleanup-test-"))  # pytest's own folders are root's alone
    if os.geteuid() == 0:
        os.chown(folder, NOBODY, NOBODY)
    return folder


HOSTILE_TREE = """
import os, sys
root, outside = sys.argv[1], sys.argv[2]
os.makedirs(f"{root}/a/b/c")
open(f"{root}/a/b/c/file", "w").write("x")
os.symlink(outside, f"{root}/a/link-out")       # a link to a folder outside: removed as a link, never followed
deep = f"{root}/deep"
os.mkdir(deep)
fd = os.open(deep, os.O_RDONLY)
for _ in range(3000):                            # deeper than a recursive delete can go
    os.mkdir("d", dir_fd=fd)
    inner = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
os.close(fd)
os.chmod(f"{root}/a/b/c", 0)
os.chmod(f"{root}/a/b", 0o500)
os.chmod(f"{root}/a", 0)
os.chmod(root, 0)
"""


def test_a_chmodded_deep_scratch_tree_is_removed_without_following_links() -> None:
    work = _owned_folder()
    try:
        root, outside = work / "scratch", work / "outside"
        outside.mkdir(mode=0o755)
        (outside / "keep").write_text("kept")
        if os.geteuid() == 0:
            os.chown(outside, NOBODY, NOBODY)
        made = _unprivileged(HOSTILE_TREE, str(root), str(outside))
        assert made.returncode == 0, made.stderr
        assert _remove_unprivileged(root) == 0  # never raises, whatever the tree
        assert not root.exists() and not root.is_symlink()
        assert (outside / "keep").read_text() == "kept"
        assert oct(outside.stat().st_mode & 0o777) == oct(0o755)  # not chmodded through the link
    finally:
        remove_scratch(work)


def test_remove_scratch_leaves_a_link_named_as_the_folder_alone(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_scratch(link)
    assert (target / "keep").read_text() == "kept"


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")
def test_a_scratch_folder_chmodded_inside_the_sandbox_is_removed_by_an_unprivileged_user() -> None:
    work = _owned_folder()
    try:
        scratch = work / "scratch"
        scratch.mkdir()
        if os.geteuid() == 0:
            os.chown(scratch, NOBODY, NOBODY)
        script = "mkdir -p /tmp/a/b/c && touch /tmp/a/b/c/f && chmod 000 /tmp/a/b/c && chmod 500 /tmp/a/b && chmod 000 /tmp/a"
        read_fd, write_fd = os.pipe()
        argv = sandbox.argv(["sh", "-c", f"{script} && echo ran"], sandbox.Policy(), sandbox.View(), scratch=scratch,
                            cwd=None, status_fd=write_fd, unprivileged=os.geteuid() == 0)
        proc = subprocess.run(argv, pass_fds=(write_fd,), capture_output=True, text=True, timeout=60, check=False,
                              preexec_fn=_as_nobody if os.geteuid() == 0 else None,
                              env=sandbox.environment({"PATH": sandbox.DEFAULT_PATH}))
        os.close(write_fd)
        os.close(read_fd)
        if proc.returncode != 0 and "namespace" in proc.stderr.lower():
            pytest.skip(f"the kernel refuses unprivileged user namespaces here: {proc.stderr.strip()}")
        assert (proc.returncode, proc.stdout) == (0, "ran\n"), proc.stderr
        assert (scratch / "a").is_dir()
        assert _remove_unprivileged(scratch) == 0
        assert not scratch.exists()
    finally:
        remove_scratch(work)


ZOMBIES = """
import json, time, psutil
from ds4ci import supervisor
sup = supervisor.Supervisor(sweep_stale=False)  # a subreaper: orphans below it are re-parented to it
codes = [sup.run(["sh", "-c", script], 5, view=supervisor.View(), grace_s=0.5).returncode
         for script in ("echo hi", "sleep 100", "sleep 100 & exec sleep 100", "setsid sh -c 'sleep 100' & exit 0")]
time.sleep(0.5)
kids = psutil.Process().children()
print(json.dumps({"containment": sup.containment, "codes": codes,
                  "zombies": [f"{p.pid} {p.name()}" for p in kids if p.status() == psutil.STATUS_ZOMBIE],
                  "live": [" ".join(p.cmdline()) for p in kids if p.status() != psutil.STATUS_ZOMBIE]}))
"""


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")
def test_no_bwrap_process_is_left_as_a_zombie_of_ds4ci() -> None:
    """bwrap's init outlives its outer process and is re-parented to ds4ci (a subreaper): ds4ci must reap it, or
    at ds4ci's exit it becomes PID 1's, which on some runners never reaps (``[bwrap] <defunct>``)."""
    ran = subprocess.run([sys.executable, "-c", ZOMBIES], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.splitlines()[-1])
    assert seen["containment"] == "sandbox" and seen["codes"] == [0, -15, -15, 0], seen
    assert seen["zombies"] == [], seen
    assert [cmd.rsplit(" ", 2)[-2].rsplit("/", 1)[-1] for cmd in seen["live"]] == ["watchdog.py"], seen  # it alone


VICTIM = """
import sys, time
from ds4ci import supervisor
from ds4ci.supervisor import sandbox, sandboxed
# Break the chain of parent-death signals: none on the outer bwrap, no --die-with-parent, so only the watchdog
# can end the sandbox when ds4ci dies.
sandboxed._preexec = lambda limit, tell_watchdog: tell_watchdog  # the watchdog is told, nothing else
argv = sandbox.argv
sandbox.argv = lambda *a, **k: (lambda c: sandbox.Argv([arg for arg in c if arg != "--die-with-parent"], c.fds))(argv(*a, **k))
child = supervisor.Supervisor(sweep_stale=False).spawn(["sh", "-c", "sleep 1000; : " + sys.argv[1]], view=supervisor.View())
print(child.pid, flush=True)
time.sleep(1000)
"""


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")
def test_the_watchdog_kills_the_sandbox_when_ds4ci_is_killed_even_if_the_death_signal_chain_breaks(
    tmp_path: Path,
) -> None:
    marker = f"ds4ci-watchdog-test-{os.getpid()}"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the sandbox's scratch folder is made
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, marker], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert victim.stdout is not None
        assert victim.stdout.readline().strip().isdigit()
        assert processes_mentioning(marker), "the sandboxed command should be running"
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ds4ci-scratch-")]
    finally:
        victim.kill()
        victim.wait()
    deadline = time.monotonic() + 15
    while (left := processes_mentioning(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
    while (scratch := [p.name for p in tmp_path.iterdir()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scratch == []  # removed by the watchdog once the namespace was empty
