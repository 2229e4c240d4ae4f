"""A server's answers as hostile input: dripped bytes, NaN, deep nesting (real processes on loopback)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gatekit import DS4CI, FOREIGN_SERVER, Workspace

from ds4ci.gate.loopback import exchange

pytestmark = pytest.mark.e2e


@pytest.fixture
def dripping_port() -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 that sends a 200 answer one byte every 0.1 s (40 bytes of body)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()
    body = json.dumps({"padding": "x" * 26}).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                for i in range(len(answer)):
                    if stop.is_set():
                        break
                    try:
                        conn.sendall(answer[i : i + 1])
                    except OSError:
                        break
                    time.sleep(0.1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    thread.join(5)


def test_the_request_timeout_is_a_deadline_for_the_whole_answer(dripping_port: int) -> None:
    # Every byte comes well within the timeout, so a per-read timeout would wait ~10 s and succeed.
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        exchange(dripping_port, "GET", "/props", 1.0)
    assert time.monotonic() - started < 8.0  # far short of the ~10 s the whole drip takes


def test_a_dripped_answer_is_no_verdict_past_the_request_timeout(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    run = ws.gate(widths="2", request_timeout=2, env=ws.env(FOREIGN_BEHAVIOUR="drip-answer"), timeout=120)
    assert run.code == 3, run.stdout + run.stderr
    assert "target-only: no answer within 2 s (--request-timeout)" in run.reasons()
    assert "internal error" not in run.reasons()


def _verified(final: Path) -> int:
    return subprocess.run([DS4CI, "verify", str(final)], capture_output=True, text=True, check=False).returncode


PROPS_KEPT, ANSWER_KEPT = "servers/target-only/props.error-body", "requests/target-only/p0-r1.response.error-body"


@pytest.mark.parametrize(
    ("behaviour", "said", "kept"),
    [
        ("nan-props", "GET /props answered HTTP 200 (the body: non-standard JSON constant NaN", PROPS_KEPT),
        ("deep-props", "GET /props answered HTTP 200 (the body: JSON nested 30000 levels deep; expected at most 64",
         PROPS_KEPT),
        ("nan-answer", "/v1/chat/completions answered HTTP 200 (the body: non-standard JSON constant NaN", ANSWER_KEPT),
        ("deep-answer", "/v1/chat/completions answered HTTP 200 (the body: JSON nested 30000 levels deep; expected at "
         "most 64", ANSWER_KEPT),
    ],
)
def test_malformed_answers_are_no_verdict_kept_as_evidence_and_sealed(
    tmp_path: Path, behaviour: str, said: str, kept: str
) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    run = ws.gate(widths="2", env=ws.env(FOREIGN_BEHAVIOUR=behaviour))
    assert run.code == 3, run.stdout + run.stderr
    reasons = run.reasons()
    assert "target-only: " + said in reasons, reasons
    assert "internal error" not in reasons and "could not be sealed" not in reasons
    assert run.results is not None
    final = Path(run.results["evidence"]["dir"])
    assert final.parent.name == "failed"  # sealed and promoted, not left in attempts/
    raw = (final / kept).read_bytes()  # the bytes as the server sent them
    assert (b"NaN" in raw) if behaviour.startswith("nan") else raw == b"[" * 30_000 + b"]" * 30_000
    manifest = json.loads((final / "manifest.json").read_text())
    assert kept in {e["path"] for e in manifest["evidence"]}
    if kept == PROPS_KEPT:
        assert not (final / "servers" / "target-only" / "props.json").exists()
    assert _verified(final) == 4  # intact and consistent; verify says no verdict with 4
