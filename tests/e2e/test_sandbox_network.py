"""The sandboxed server has a network namespace of its own: no host service is in its reach, and only the gate
reaches it (real bwrap, a real host listener on 127.0.0.1 and a real abstract Unix socket)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gatekit import Workspace
from paths import ROOT

from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")

# What the sandboxed process tries: the host's loopback listener, then the host's abstract socket.
PROBES = """
import socket, sys
def probe(name, family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(address)
        s.sendall(b"escaped")
        print(f"PROBE {name}: ESCAPED", file=sys.stderr, flush=True)
    except OSError as exc:
        print(f"PROBE {name}: held ({exc.__class__.__name__})", file=sys.stderr, flush=True)
    finally:
        s.close()
probe("host-tcp", socket.AF_INET, ("127.0.0.1", TCP_PORT))
probe("host-abstract", socket.AF_UNIX, ABSTRACT)
"""


@dataclass
class HostServices:
    """A TCP listener on the host's 127.0.0.1 and an abstract Unix socket, counting who connects."""

    port: int
    abstract: bytes
    connected: list[str] = field(default_factory=list)

    def probes(self) -> str:
        return PROBES.replace("TCP_PORT", str(self.port)).replace("ABSTRACT", repr(self.abstract))


@pytest.fixture
def host_services() -> Iterator[HostServices]:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0ds4ci-test-{os.getpid()}-{id(unix)}".encode()
    unix.bind(name)
    services = HostServices(tcp.getsockname()[1], name)
    for listener, what in ((tcp, "host-tcp"), (unix, "host-abstract")):
        listener.listen(4)

        def accept(listener: socket.socket = listener, what: str = what) -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                services.connected.append(what)
                conn.close()

        threading.Thread(target=accept, daemon=True).start()
    try:
        # the listeners answer from here (the precondition of every test below)
        for family, address in ((socket.AF_INET, ("127.0.0.1", services.port)), (socket.AF_UNIX, name)):
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.connect(address)
        deadline = time.monotonic() + 30  # the accept threads record those two connections in their own time
        while sorted(services.connected) != ["host-abstract", "host-tcp"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(services.connected) == ["host-abstract", "host-tcp"], services.connected
        services.connected.clear()  # from here on, any connection is the sandbox's
        yield services
    finally:
        tcp.close()
        unix.close()


def _probes(text: str) -> dict[str, str]:
    return {line.split(":")[0][len("PROBE "):]: line.split(": ", 1)[1].split(" ")[0]
            for line in text.splitlines() if line.startswith("PROBE ")}


def test_the_gates_server_reaches_no_host_service_and_the_gate_still_reaches_it(
    tmp_path: Path, host_services: HostServices
) -> None:
    server = tmp_path / "probing-server"
    server.write_text(f"#!{sys.executable}\n{host_services.probes()}\n"
                      "import os\nos.execv(sys.executable, [sys.executable, '-m', 'ds4ci.simulator', *sys.argv[1:]])\n")
    server.chmod(0o755)
    ws = Workspace.create(tmp_path, server=server)
    before = list(host_services.connected)
    config = tmp_path / "ds4ci.toml"  # the trusted config lets a server script name this interpreter
    config.write_text(f'[gate]\nserver_interpreters = ["{sys.executable}"]\n')
    run = ws.gate(widths="2", config=config)
    assert run.code == 0, run.stdout + run.stderr  # the gate talked to the simulator through the namespace
    assert "(containment: sandbox, its own network namespace)" in run.stderr
    (attempt,) = (ws.root / "evidence" / "runs").iterdir()
    for arm in ("target-only", "q2"):
        log = (attempt / "servers" / arm / "stderr.log").read_text()
        assert _probes(log) == {"host-tcp": "held", "host-abstract": "held"}, log
    assert host_services.connected == before  # nothing from the sandbox reached them


UNPRIVILEGED = """
import json, socket, sys, time
from ds4ci import supervisor
from ds4ci.supervisor import sandbox
probes = sys.argv[1]
serve = probes + '''
try:
    open("/tmp/fill", "wb").write(b"f" * (2 << 20))
    print("FILL: ESCAPED", file=sys.stderr, flush=True)
except OSError:
    print("FILL: held", file=sys.stderr, flush=True)
listener = socket.socket(); listener.bind(("127.0.0.1", 38517)); listener.listen(1)
print("LISTENING", file=sys.stderr, flush=True)
conn, _ = listener.accept(); conn.sendall(b"hello from the namespace"); conn.close()
'''
from pathlib import Path
out = Path(sys.argv[2])
sup = supervisor.Supervisor(sweep_stale=False)
child = sup.spawn([sys.executable, "-c", serve], stderr=out,
                  view=supervisor.View(ro=sandbox.python_runtime(), own_network=True, scratch_bytes=1 << 20))
deadline = time.monotonic() + 30
while "LISTENING" not in (out.read_text() if out.exists() else "") and child.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
got = b""
with child.new_socket() as sock:
    sock.settimeout(10)
    sock.connect(("127.0.0.1", 38517))
    got = sock.recv(100)
child.wait(10)
child.sweep()
print(json.dumps({"containment": child.containment, "got": got.decode(), "full": child.scratch_full}))
"""


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def _nobodys_python() -> tuple[list[str], dict[str, str]]:
    """An interpreter `nobody` can run with ds4ci importable: this one, or the system's with this venv's packages
    (this one may live in root's home)."""
    import site

    for python, path in ((sys.executable, ""), ("/usr/bin/python3", os.pathsep.join([str(ROOT), *site.getsitepackages()]))):
        env = {k: v for k, v in os.environ.items() if k not in (sandbox.RO_VARIABLE, sandbox.RW_VARIABLE)}  # root's
        env.update({"PYTHONPATH": path} if path else {})
        try:
            tried = subprocess.run([python, "-c", "import ds4ci.supervisor"], capture_output=True, timeout=60,
                                   check=False, preexec_fn=_as_nobody, env=env)
        except OSError:  # nobody may not even run it
            continue
        if tried.returncode == 0:
            return [python], env
    pytest.skip("no interpreter that `nobody` can run ds4ci with")


def test_unprivileged_the_namespace_and_the_scratch_quota_hold_and_only_ds4ci_reaches_the_server(
    host_services: HostServices,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    python, env = _nobodys_python()
    work = Path(tempfile.mkdtemp(prefix="ds4ci-nobody-net-"))  # pytest's own folders are root's alone
    os.chown(work, 65534, 65534)
    out = work / "server.log"
    before = list(host_services.connected)
    try:
        proc = subprocess.run(
            [*python, "-c", UNPRIVILEGED, host_services.probes(), str(out)], capture_output=True, text=True,
            timeout=120, check=False, preexec_fn=_as_nobody, env={**env, "TMPDIR": str(work)},
        )
        if proc.returncode != 0 and "bwrap:" in proc.stderr and "namespace" in proc.stderr.lower():
            pytest.skip(f"the kernel refuses unprivileged user namespaces here: {proc.stderr.strip()[-300:]}")
        assert proc.returncode == 0, proc.stderr[-2000:] + (out.read_text() if out.exists() else "(no server log)")
        seen = json.loads(proc.stdout.splitlines()[-1])
        quota = sandbox.sizes_tmpfs()  # bubblewrap 0.7 and later
        assert seen == {"containment": "sandbox", "got": "hello from the namespace", "full": True if quota else None}
        assert not quota or "FILL: held" in out.read_text()  # its /tmp quota holds unprivileged too
        assert _probes(out.read_text()) == {"host-tcp": "held", "host-abstract": "held"}, out.read_text()
        assert host_services.connected == before
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
