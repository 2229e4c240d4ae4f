"""The runner-side gate service, run as users run it: ``ds4ci service run`` as a real process on a Unix socket in
a temp dir, ``ds4ci service request`` as the job's client, real git repositories, the simulator built by the head's
own (sandboxed) build script, bubblewrap.

The head's build waits for a ``release`` file in its own checkout when the head holds ``hold`` (and says so with a
``building`` file there): the test creates it
(in the service's private checkout) once it has seen what it needs, so queue order is observed, never timed.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from gatekit import DS4CI, Workspace, sha256

from ds4ci.supervisor import sandbox

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox: {sandbox.refusal()}")]

RUNNER = "svc-runner"
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
BUILD = """#!/bin/sh
if [ -e hold ]; then
  touch building
  n=0
  while [ ! -e release ]; do sleep 0.2; n=$((n+1)); [ $n -gt 1500 ] && exit 9; done
fi
mkdir -p out
printf '#!/bin/sh\\n%sexec "%s" -m ds4ci.simulator "$@"\\n' "$(cat fault 2>/dev/null)" '{python}' > out/dflash_server
chmod +x out/dflash_server
"""


def base_config(ws: Workspace, *, max_tokens: int = 64, widths: str = "[2]") -> str:
    return (f'[gate]\ntarget = "{ws.target}"\ntarget_sha256 = "{sha256(ws.target)}"\n'
            f'draft = "{ws.draft}"\ndraft_sha256 = "{sha256(ws.draft)}"\n'
            f'prompts = [{{file = "{ws.prompts[0]}", sha256 = "{sha256(ws.prompts[0])}"}}]\n'
            f'widths = {widths}\nmax_tokens = {max_tokens}\nstartup_timeout = 60\nrequest_timeout = 60\n'
            '[build]\ncommand = "./build.sh"\ncwd = "."\ntimeout = 400\nserver_bin = "out/dflash_server"\n'
            f'[runners.{RUNNER}]\n')


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if name.endswith(".sh"):
            path.chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Repo:
    path: Path
    base: str
    ws: Workspace
    upstream: Path  # the trusted repository: a bare clone whose main is the base, as the service fetches it


def make_repo(tmp: Path) -> Repo:
    ws = Workspace.create(tmp / "ws")
    path = tmp / "repo"
    path.mkdir()
    git(path, "init", "-q")
    base = commit(path, {"ds4ci.toml": base_config(ws), "build.sh": BUILD.format(python=sys.executable),
                         "README": "server source\n"}, "base")
    git(path, "branch", "-f", "main", base)
    upstream = tmp / "upstream.git"
    subprocess.run([*GIT, "clone", "-q", "--bare", str(path), str(upstream)], check=True)
    return Repo(path, base, ws, upstream)


def merge_to_trusted(repo: Repo, files: dict[str, str], message: str) -> str:
    """A commit on the trusted branch (main) of the upstream, as a merged pull request makes one; its SHA."""
    git(repo.path, "checkout", "-q", "main")
    sha = commit(repo.path, files, message)
    git(repo.path, "push", "-q", str(repo.upstream), "main")
    git(repo.path, "checkout", "-q", "--detach", repo.base)
    return sha


def branch(repo: Repo, name: str, files: dict[str, str]) -> str:
    git(repo.path, "checkout", "-q", "-b", name, repo.base)
    head = commit(repo.path, files, name)
    git(repo.path, "checkout", "-q", "--detach", repo.base)
    return head


@dataclass
class Service:
    socket: Path
    state: Path
    log: Path
    key: Path
    proc: subprocess.Popen[bytes]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_log(self, needle: str, count: int = 1) -> None:
        for _ in range(3000):
            if self.log_text().count(needle) >= count:
                return
            assert self.proc.poll() is None, self.log_text()
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} x{count} never appeared in the service log:\n{self.log_text()}")

    def stop(self) -> int:
        """SIGTERM, as systemd stops it; the exit code."""
        self.proc.terminate()
        return self.proc.wait(timeout=60)

    def records(self) -> list[dict[str, Any]]:
        folder = self.state / "requests"
        return [json.loads(p.read_text()) for p in sorted(folder.iterdir())] if folder.is_dir() else []

    def held_checkouts(self) -> list[Path]:
        work = self.state / "work"
        return [p / "src" for p in work.iterdir() if (p / "src" / "building").exists()] if work.is_dir() else []

    def release_next(self) -> None:
        for _ in range(3000):
            held = [p for p in self.held_checkouts() if not (p / "release").exists()]
            if held:
                (held[0] / "release").write_text("go\n")
                return
            time.sleep(0.1)
        raise AssertionError("no held build appeared:\n" + self.log_text())


def make_key(path: Path) -> None:
    proc = subprocess.run([DS4CI, "runner-key", "init", "--path", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@contextmanager
def service(tmp: Path, ws: Workspace, *extra: str) -> Iterator[Service]:
    key = tmp / "keys" / "runner-key.pem"
    make_key(key)
    sock, state, log = tmp / "run" / "gate.sock", tmp / "state", tmp / "service.log"
    sock.parent.mkdir()
    trusted = [] if "--trusted-repo" in extra else ["--trusted-repo", str(tmp / "upstream.git"), "--trusted-branch",
                                                    "main"]
    with log.open("wb") as out:
        proc = subprocess.Popen([DS4CI, "service", "run", "--socket", str(sock), "--state-dir", str(state),
                                 "--signing-key", str(key), "--runner", RUNNER, *trusted, *extra],
                                env=ws.env(), stdout=out, stderr=subprocess.STDOUT)
    svc = Service(sock, state, log, key, proc)
    try:
        svc.wait_log("listening on")
        yield svc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def request_args(svc: Service, repo: Repo, head: str, out: Path, runner: str = RUNNER) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    return [DS4CI, "service", "request", "--socket", str(svc.socket), "--checkout", str(repo.path),
            "--head", head, "--base", repo.base, "--runner", runner, "--bundle-out", str(out / "bundle.tar.gz"),
            "--results-out", str(out / "results.json")]


def request(svc: Service, repo: Repo, head: str, out: Path, runner: str = RUNNER) -> subprocess.CompletedProcess[str]:
    return subprocess.run(request_args(svc, repo, head, out, runner), capture_output=True, text=True, timeout=600,
                          check=False, env=repo.ws.env())


def verify(bundle: Path, svc: Service) -> subprocess.CompletedProcess[str]:
    line = subprocess.run([sys.executable, "-c", "import sys; from ds4ci.evidence import keys; "
                           "print(keys.public_line(keys.load_private(__import__('pathlib').Path(sys.argv[1]))"
                           ".public_key()))", str(svc.key)], capture_output=True, text=True, check=True).stdout.strip()
    return subprocess.run([DS4CI, "verify", str(bundle), "--key", line], capture_output=True, text=True, check=False)


def test_two_requests_for_one_runner_run_in_turn_and_a_full_queue_answers_busy(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    first = branch(repo, "first", {"hold": "wait for release\n", "a.txt": "a\n"})
    second = branch(repo, "second", {"hold": "wait for release\n", "b.txt": "b\n", "fault": "DS4SIM_FAULTS=leak-fused-verify "})
    with service(tmp_path, repo.ws, "--queue-depth", "1") as svc:
        a = subprocess.Popen(request_args(svc, repo, first, tmp_path / "a"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=repo.ws.env())
        svc.wait_log("gate starts")
        while not svc.held_checkouts():  # the first request's build is running and waits
            time.sleep(0.1)
        b = subprocess.Popen(request_args(svc, repo, second, tmp_path / "b"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=repo.ws.env())
        svc.wait_log("queued at 1", count=2)  # the second waits behind the first
        c = request(svc, repo, first, tmp_path / "c")
        assert c.returncode == 3 and "busy" in c.stderr and "try again later" in c.stderr, c.stderr
        assert not (tmp_path / "c" / "results.json").exists()
        svc.release_next()
        a_out, a_err = a.communicate(timeout=600)
        svc.release_next()
        b_out, b_err = b.communicate(timeout=600)
        records = svc.records()
    assert a.returncode == 0, a_out + a_err
    assert b.returncode == 1, b_out + b_err  # the second head's server leaks its approximate verifier: fail, not lost
    assert "PASS" in a_out or "pass" in a_out, a_out
    ran = [r for r in records if r.get("gate_argv")]
    assert [r["request"]["head"] for r in ran] == [first, second]
    assert ran[0]["finished"] <= ran[1]["started"]  # one after the other, never both at once
    assert all(r["peer"]["pid"] > 0 and r["peer"]["uid"] == os.getuid() for r in ran)
    for out, head, verdict in ((tmp_path / "a", first, "pass"), (tmp_path / "b", second, "fail")):
        doc = json.loads((out / "results.json").read_text())
        assert doc["verdict"] == verdict and doc["revisions"]["head"]["sha"] == head
        assert doc["revisions"]["base"]["sha"] == repo.base
        proved = verify(out / "bundle.tar.gz", svc)
        assert proved.returncode == (0 if verdict == "pass" else 1), proved.stdout + proved.stderr
    assert not list((svc.state / "work").iterdir())  # private checkouts are gone once answered


def test_the_trusted_config_wins_over_the_heads_and_a_linked_settings_path_writes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    head = branch(repo, "change-config", {"ds4ci.toml": base_config(repo.ws, max_tokens=32, widths="[2, 3]")})
    git(repo.path, "checkout", "-q", "change-config")
    (repo.path / ".ds4ci-trusted.toml").symlink_to(victim)  # committed as a link into the caller's files
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-qm", "link the settings path")
    head = git(repo.path, "rev-parse", "HEAD")
    # the caller's worktree is not what is gated: an uncommitted edit here changes nothing
    (repo.path / "ds4ci.toml").write_text(base_config(repo.ws, max_tokens=16, widths="[4]"))
    with service(tmp_path, repo.ws) as svc:
        proc = request(svc, repo, head, tmp_path / "out")
        (record,) = svc.records()
    assert victim.read_text() == "untouched\n"
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    # the base's settings were used; the modified tree (below) stops the gate before any server starts
    assert doc["settings"]["max_tokens"] == 64 and doc["settings"]["configured_widths"] == [2], doc["settings"]
    assert doc["widths"] == []
    assert "ds4ci.toml differs from the trusted branch's" in str(record["note"]), record
    # the head tracked .ds4ci-trusted.toml, which the service replaced by the base's config: a modified tree (3)
    assert proc.returncode == 3 and doc["revisions"]["dirty"] is True, proc.stdout + proc.stderr


def test_the_trusted_config_is_used_and_the_bundle_is_signed_by_the_service_key(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    head = branch(repo, "change-config", {"ds4ci.toml": base_config(repo.ws, max_tokens=32, widths="[2, 3]")})
    with service(tmp_path, repo.ws) as svc:
        proc = request(svc, repo, head, tmp_path / "out")
        (record,) = svc.records()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["settings"]["max_tokens"] == 64 and [w["q"] for w in doc["widths"]] == [2], doc["settings"]
    assert any("ds4ci.toml differs from the trusted branch's" in w for w in doc.get("warnings", [])), doc["warnings"]
    assert doc["containment"] == "sandbox"  # required by the service: PR code never runs as the key's user unboxed
    assert doc["signing"] == "service"  # the report says whose key signed
    assert record["exit_code"] == 0 and record["outputs"]["bundle"] == sha256(tmp_path / "out" / "bundle.tar.gz")
    assert verify(tmp_path / "out" / "bundle.tar.gz", svc).returncode == 0


def _raw(svc: Service, payload: bytes, declared: int | None = None) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(svc.socket))
        conn.sendall(struct.pack(">I", len(payload) if declared is None else declared) + payload)
        size = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))[0]
        answer: dict[str, object] = json.loads(conn.recv(size, socket.MSG_WAITALL))
        return answer


def test_malformed_oversized_and_sign_requests_are_refused_and_the_service_keeps_serving(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    head = branch(repo, "plain", {"a.txt": "a\n"})
    good = {"protocol": "ds4ci-gate/1", "verb": "gate", "checkout": str(repo.path), "head": head, "base": repo.base,
            "runner": RUNNER, "widths": None}
    with service(tmp_path, repo.ws) as svc:
        over = _raw(svc, b"{}", declared=10 * 1024 * 1024)
        assert over["status"] == "refused" and "over the 65536-byte cap" in str(over["message"]), over
        broken = _raw(svc, b'{"protocol": "ds4ci-gate/1", "verb": ')
        assert broken["status"] == "refused" and "not valid JSON" in str(broken["message"]), broken
        dup = _raw(svc, b'{"verb": "gate", "verb": "gate"}')
        assert dup["status"] == "refused" and "duplicate key" in str(dup["message"]), dup
        sign = _raw(svc, json.dumps({**good, "verb": "sign", "payload": "forged"}).encode())
        assert sign["status"] == "refused" and "never signs" in str(sign["message"]), sign
        old = _raw(svc, json.dumps({**good, "protocol": "ds4ci-gate/0"}).encode())
        assert old["status"] == "refused" and "ds4ci-gate/1" in str(old["message"]), old
        extra = _raw(svc, json.dumps({**good, "config": "/tmp/evil.toml"}).encode())
        assert extra["status"] == "refused" and "unknown keys" in str(extra["message"]), extra
        assert not svc.records()  # nothing ran
        if os.geteuid() == 0:  # the job's checkout belongs to another user than the service's, as on a runner
            subprocess.run(["chown", "-R", "nobody", str(repo.path)], check=True)
        proc = request(svc, repo, head, tmp_path / "out")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert svc.proc.poll() is None


def test_service_request_exit_codes_refused_unreachable_and_outputs_never_replaced(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    head = branch(repo, "plain", {"a.txt": "a\n"})
    with service(tmp_path, repo.ws) as svc:
        bad_sha = request(svc, repo, "abc", tmp_path / "o1")
        assert bad_sha.returncode == 2 and "full commit SHA" in bad_sha.stderr, bad_sha.stderr
        unknown = request(svc, repo, head, tmp_path / "o2", runner="other")
        assert unknown.returncode == 2 and "this service gates svc-runner" in unknown.stderr, unknown.stderr
        missing = request(svc, repo, "0" * 40, tmp_path / "o3")
        assert missing.returncode == 2 and "cannot fetch" in missing.stderr, missing.stderr
        (tmp_path / "o4").mkdir()
        (tmp_path / "o4" / "results.json").write_text("earlier\n")
        exists = request(svc, repo, head, tmp_path / "o4")
        assert exists.returncode == 2 and "never replaced" in exists.stderr
        assert (tmp_path / "o4" / "results.json").read_text() == "earlier\n"
    gone = request(svc, repo, head, tmp_path / "o5")
    assert gone.returncode == 3 and "cannot reach the gate service" in gone.stderr, gone.stderr
    assert "Traceback" not in bad_sha.stderr + unknown.stderr + missing.stderr + gone.stderr


def test_service_run_refuses_a_key_others_can_read_and_a_path_that_is_not_a_socket(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    make_key(key)
    key.chmod(0o640)
    base = [DS4CI, "service", "run", "--state-dir", str(tmp_path / "state"), "--runner", RUNNER,
            "--trusted-repo", str(tmp_path / "upstream.git")]
    loose = subprocess.run([*base, "--socket", str(tmp_path / "s"), "--signing-key", str(key)],
                           capture_output=True, text=True, check=False, timeout=60)
    assert loose.returncode == 2 and "mode 0600" in loose.stderr, loose.stderr
    key.chmod(0o600)
    (tmp_path / "file").write_text("x")
    taken = subprocess.run([*base, "--socket", str(tmp_path / "file"), "--signing-key", str(key)],
                           capture_output=True, text=True, check=False, timeout=60)
    assert taken.returncode == 2 and "is not a socket" in taken.stderr, taken.stderr


def test_the_key_is_not_readable_by_another_user_and_the_socket_is_0660(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    with service(tmp_path, repo.ws) as svc:
        assert svc.socket.stat().st_mode & 0o777 == 0o660
        assert svc.key.stat().st_mode & 0o777 == 0o600 and svc.key.stat().st_uid == os.geteuid()
        if os.geteuid() == 0:  # a caller that is not the service's user cannot read the key
            nobody = pwd.getpwnam("nobody")
            read = subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                                   "--clear-groups", "cat", str(svc.key)], capture_output=True, text=True, check=False)
            assert read.returncode != 0 and "Permission denied" in read.stderr, read.stderr
        assert svc.stop() == 0 and "stopped" in svc.log_text()
        assert not svc.socket.exists()  # the socket it bound is removed


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to the service user needs root")
def test_install_in_root_mode_writes_units_and_a_key_only_the_service_user_reads(tmp_path: Path) -> None:
    root = tmp_path / "root"
    old = tmp_path / "home" / "runner-key.pem"
    make_key(old)
    before = old.read_bytes()
    proc = subprocess.run([DS4CI, "service", "install", "--root", str(root), "--user", "nobody", "--runner", RUNNER,
                           "--socket-group", "nogroup", "--key-from", str(old), "--trusted-repo", "/srv/git/lucebox.git"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nobody = pwd.getpwnam("nobody")
    key = root / "etc" / "ds4ci" / "runner-key.pem"
    assert key.read_bytes() == before and not old.exists()  # moved, not copied
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_uid == nobody.pw_uid
    assert key.parent.stat().st_mode & 0o777 == 0o700 and key.parent.stat().st_uid == nobody.pw_uid
    unit = (root / "etc" / "systemd" / "system" / "ds4ci-gate.service").read_text()
    sock = (root / "etc" / "systemd" / "system" / "ds4ci-gate.socket").read_text()
    assert "User=nobody" in unit and "-I -m ds4ci service run" in unit and f"--runner {RUNNER}" in unit
    assert "UMask=0077" in unit and "--signing-key /etc/ds4ci/runner-key.pem" in unit
    assert "--trusted-repo /srv/git/lucebox.git --trusted-branch main" in unit
    assert "SocketMode=0660" in sock and "SocketGroup=nogroup" in sock and "ListenStream=/run/ds4ci/gate.sock" in sock
    assert "d /var/lib/ds4ci 0700 nobody nobody" in (root / "etc" / "tmpfiles.d" / "ds4ci-gate.conf").read_text()
    assert 'public_key = "ed25519:' in proc.stdout
    again = subprocess.run([DS4CI, "service", "install", "--root", str(root), "--user", "nobody", "--runner", RUNNER,
                            "--key-from", str(key), "--trusted-repo", "/srv/git/lucebox.git"],
                           capture_output=True, text=True, check=False)
    assert again.returncode == 2 and "never overwritten" in again.stderr, again.stderr


def test_install_dry_run_writes_nothing(tmp_path: Path) -> None:
    proc = subprocess.run([DS4CI, "service", "install", "--dry-run", "--root", str(tmp_path / "r"), "--runner",
                           RUNNER, "--trusted-repo", "/srv/git/lucebox.git"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "would write" in proc.stdout and "ExecStart=" in proc.stdout
    assert not (tmp_path / "r").exists()


def test_a_base_off_the_trusted_branch_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    head = branch(repo, "plain", {"a.txt": "a\n"})
    own_base = branch(repo, "own-base", {"ds4ci.toml": base_config(repo.ws, max_tokens=16)})  # a base of its own
    with service(tmp_path, repo.ws) as svc:
        forged = request(svc, replace(repo, base=own_base), head, tmp_path / "forged")
        assert forged.returncode == 2 and "is not a commit of the trusted branch main" in forged.stderr, forged.stderr
        assert not (tmp_path / "forged" / "results.json").exists()
        real = request(svc, repo, head, tmp_path / "real")
        assert real.returncode == 0, real.stdout + real.stderr
    assert json.loads((tmp_path / "real" / "results.json").read_text())["settings"]["max_tokens"] == 64


def test_stopping_the_service_stops_its_running_gate_which_keeps_its_evidence(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    head = branch(repo, "held", {"hold": "wait for release\n"})
    with service(tmp_path, repo.ws) as svc:
        client = subprocess.Popen(request_args(svc, repo, head, tmp_path / "out"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=repo.ws.env())
        while not svc.held_checkouts():  # the build runs and waits
            assert client.poll() is None, client.communicate()
            time.sleep(0.1)
        assert svc.stop() == 0, svc.log_text()
        out, err = client.communicate(timeout=120)
    assert client.returncode == 3, out + err  # no verdict, never a pass
    if (tmp_path / "out" / "results.json").exists():  # the answer of the stopped gate made it out
        assert json.loads((tmp_path / "out" / "results.json").read_text())["verdict"] == "error"
    kept = list((svc.state / "evidence" / "failed").glob("*"))
    assert len(kept) == 1, svc.log_text()  # the interrupted attempt's evidence stays, promoted as failed
    (record,) = svc.records()
    assert record["exit_code"] == 3 and record["request"]["head"] == head


def test_the_socket_systemd_passes_is_the_one_served(tmp_path: Path) -> None:
    """Socket activation as systemd does it: the listening socket on fd 3, LISTEN_PID the service's own pid."""
    key, path = tmp_path / "key.pem", tmp_path / "activated.sock"
    make_key(key)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    fd = listener.fileno()
    argv = ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"', DS4CI, "service", "run", "--state-dir",
            str(tmp_path / "state"), "--signing-key", str(key), "--runner", RUNNER, "--trusted-repo",
            str(tmp_path / "upstream.git")]
    with (tmp_path / "log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, pass_fds=(fd, 3),
                                preexec_fn=lambda: os.dup2(fd, 3))  # fd 3, as systemd passes it
    listener.close()
    try:
        svc = Service(path, tmp_path / "state", tmp_path / "log", key, proc)
        svc.wait_log("listening on the socket systemd passed")
        answer = _raw(svc, json.dumps({"protocol": "ds4ci-gate/1", "verb": "sign"}).encode())
        assert answer["status"] == "refused" and "never signs" in str(answer["message"])
        assert svc.stop() == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert path.exists()  # systemd's socket: the service leaves it where it is


def test_service_run_and_install_refuse_to_start_without_a_trusted_repository(tmp_path: Path) -> None:
    """The config comes from the trusted branch or from nowhere: no mode reads it from a commit a caller names."""
    key = tmp_path / "key.pem"
    make_key(key)
    run = subprocess.run([DS4CI, "service", "run", "--state-dir", str(tmp_path / "state"), "--runner", RUNNER,
                          "--socket", str(tmp_path / "s"), "--signing-key", str(key)],
                         capture_output=True, text=True, check=False, timeout=60)
    assert run.returncode == 2 and "--trusted-repo: expected the repository" in run.stderr, run.stderr
    assert "--trusted-branch main" in run.stderr and not (tmp_path / "s").exists()
    install = subprocess.run([DS4CI, "service", "install", "--dry-run", "--root", str(tmp_path / "r"), "--runner",
                              RUNNER], capture_output=True, text=True, check=False)
    assert install.returncode == 2 and "--trusted-repo" in install.stderr, install.stderr
    unit = subprocess.run([DS4CI, "service", "install", "--dry-run", "--root", str(tmp_path / "r"), "--runner", RUNNER,
                           "--trusted-repo", "https://github.com/o/r.git", "--trusted-branch", "release"],
                          capture_output=True, text=True, check=False)
    assert unit.returncode == 0 and "--trusted-repo https://github.com/o/r.git --trusted-branch release" in unit.stdout


def _key_lines(key: Path) -> list[bytes]:
    return [line for line in key.read_bytes().splitlines() if line and not line.startswith(b"-----")]


def test_a_base_named_by_the_caller_chooses_no_config_and_the_key_reaches_no_bundle(tmp_path: Path) -> None:
    """Attack: a caller names as base a commit of the trusted branch whose ds4ci.toml lists the service key as a
    pinned prompt file. The config comes from the branch's tip, so that commit's settings are never read."""
    repo = make_repo(tmp_path)
    head = branch(repo, "plain", {"a.txt": "a\n"})
    with service(tmp_path, repo.ws) as svc:
        prompt = f'prompts = [{{file = "{svc.key}", sha256 = "{sha256(svc.key)}"}}]\n'
        leaky = base_config(repo.ws).replace(
            f'prompts = [{{file = "{repo.ws.prompts[0]}", sha256 = "{sha256(repo.ws.prompts[0])}"}}]\n', prompt)
        assert prompt in leaky
        old = merge_to_trusted(repo, {"ds4ci.toml": leaky}, "an old config that named the key")
        tip = merge_to_trusted(repo, {"ds4ci.toml": base_config(repo.ws, max_tokens=48)}, "the config now")
        if os.geteuid() == 0:  # the job's checkout belongs to another user than the service's, as on a runner
            subprocess.run(["chown", "-R", "nobody", str(repo.path)], check=True)
        proc = request(svc, replace(repo, base=old), head, tmp_path / "out")
        (record,) = svc.records()
    bundle = (tmp_path / "out" / "bundle.tar.gz").read_bytes()
    with tarfile.open(tmp_path / "out" / "bundle.tar.gz") as tar:
        texts = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]  # type: ignore[union-attr]
    for line in _key_lines(svc.key):
        assert not any(line in text for text in [bundle, *texts, proc.stdout.encode(), proc.stderr.encode()])
    assert sha256(svc.key) not in proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["settings"]["max_tokens"] == 48 and record["config_commit"] == tip  # the tip's, not the named base's
    assert doc["revisions"]["base"]["sha"] == old  # the base is still the one named, for the revisions record


def test_a_trusted_config_whose_hash_cache_is_the_key_is_refused_and_the_key_stays(tmp_path: Path) -> None:
    """Attack: gate.hash_cache_path names the service's key; the gate would replace the key with a JSON cache."""
    repo = make_repo(tmp_path)
    head = branch(repo, "plain", {"a.txt": "a\n"})
    with service(tmp_path, repo.ws) as svc:
        before = svc.key.read_bytes()
        merge_to_trusted(repo, {"ds4ci.toml": base_config(repo.ws).replace(
            "[build]", f'hash_cache_path = "{svc.key}"\n[build]')}, "a hash cache at the key")
        proc = request(svc, replace(repo, base=git(repo.path, "rev-parse", "main")), head, tmp_path / "out")
        (record,) = svc.records()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"gate.hash_cache_path = {svc.key}" in proc.stderr and "inside the signing key's folder" in proc.stderr
    assert svc.key.read_bytes() == before and record["exit_code"] == 2
    assert "Traceback" not in proc.stderr


def test_a_trusted_config_that_binds_the_service_state_is_refused_and_the_records_stay(tmp_path: Path) -> None:
    """Attack: [sandbox] rw_paths names the service's state folder; the pull request's build rewrites its records."""
    repo = make_repo(tmp_path)
    rewrite = f'for f in "{tmp_path / "state"}"/requests/*.json; do echo tampered > "$f"; done\n'
    head = branch(repo, "rewrite", {"build.sh": BUILD.format(python=sys.executable).replace(
        "mkdir -p out\n", rewrite + "mkdir -p out\n")})
    with service(tmp_path, repo.ws) as svc:
        first = request(svc, repo, "0" * 40, tmp_path / "o1")  # a refused request leaves its record
        assert first.returncode == 2
        (earlier,) = sorted((svc.state / "requests").iterdir())
        kept = earlier.read_bytes()
        for binds in ([str(svc.state)], [str(tmp_path)]):  # the folder itself, or one that holds it
            merge_to_trusted(repo, {"ds4ci.toml": base_config(repo.ws) + f"[sandbox]\nrw_paths = {json.dumps(binds)}\n"},
                             "bind the state")
            out = tmp_path / f"out-{len(binds[0])}"
            proc = request(svc, replace(repo, base=git(repo.path, "rev-parse", "main")), head, out)
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert "sandbox.rw_paths" in proc.stderr and "the gate service's state folder" in proc.stderr, proc.stderr
        assert earlier.read_bytes() == kept
        assert all(b"tampered" not in p.read_bytes() for p in (svc.state / "requests").iterdir())


def test_a_build_that_links_the_server_binary_to_the_service_key_is_refused_and_the_key_stays_unsaid(
    tmp_path: Path,
) -> None:
    """The pull request changes only its build script: out/dflash_server becomes a link to the service's own key.
    The service's gate (config from the trusted branch) refuses the link before any server starts; no line of the
    key reaches the caller's output, results.json, the bundle or the service's log."""
    repo = make_repo(tmp_path)  # its upstream is the trusted repository, whose main is the base
    key = tmp_path / "keys" / "runner-key.pem"  # where service() makes the key
    head = branch(repo, "link-key", {"build.sh": f"#!/bin/sh\nmkdir -p out\nln -sf {key} out/dflash_server\n"})
    with service(tmp_path, repo.ws) as svc:
        proc = request(svc, repo, head, tmp_path / "out")
        secret = [line for line in key.read_text().splitlines() if line and not line.startswith("-----")]
        log = svc.log_text()
    said = [proc.stdout, proc.stderr, log]
    results = tmp_path / "out" / "results.json"
    if results.exists():
        said.append(results.read_text())
    bundle = tmp_path / "out" / "bundle.tar.gz"
    if bundle.exists():
        with tarfile.open(bundle) as tar:
            said += [tar.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
                     for m in tar.getmembers() if m.isfile()]
    assert secret and not [line for line in secret if any(line in text for text in said)]
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "out/dflash_server is a symbolic link" in proc.stdout + proc.stderr
