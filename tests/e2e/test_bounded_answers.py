"""A server's answer is read with ds4ci's caps, never its framing: a real hostile HTTP server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gatekit import FOREIGN_SERVER, Workspace

from ds4ci.gate.http11 import BrokenAnswer
from ds4ci.gate.loopback import BODY_KEEP_BYTES, exchange

pytestmark = pytest.mark.e2e


def _hostile(head: bytes, endless: bytes) -> Callable[[], Iterator[tuple[int, list[int]]]]:
    """A fixture: a server that sends ``head`` and then ``endless`` again and again until the client hangs up;
    yields its port and the count of bytes it managed to send per connection."""

    @pytest.fixture
    def serve() -> Iterator[tuple[int, list[int]]]:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        sent: list[int] = []

        def loop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(65536)
                    total = 0
                    try:
                        conn.sendall(head)
                        while total < 1 << 30:  # a GiB at most, so a reader that trusts the framing ends
                            conn.sendall(endless)
                            total += len(endless)
                    except OSError:
                        pass
                    sent.append(total)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        yield listener.getsockname()[1], sent
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() the loop waits in (close alone does not)
        listener.close()
        thread.join(10)
        assert not thread.is_alive(), "the hostile server's loop did not end"

    return serve


minus_one = _hostile(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", b"x" * 65536)
endless_chunks = _hostile(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"10000\r\n" + b"y" * 65536 + b"\r\n")
huge_length = _hostile(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", b"z" * 65536)
unframed = _hostile(b"HTTP/1.1 200 OK\r\n\r\n", b"w" * 65536)
endless_header = _hostile(b"HTTP/1.1 200 OK\r\nX-Pad: ", b"p" * 65536)


def test_a_chunk_size_of_minus_one_is_refused_not_read_to_the_end(minus_one: tuple[int, list[int]]) -> None:
    port, _ = minus_one
    with pytest.raises(BrokenAnswer, match=r"expected a chunk size in hexadecimal digits, found '-1'"):
        exchange(port, "GET", "/props", 30.0)


@pytest.mark.parametrize(
    ("name", "said", "byte"),
    [
        ("endless_chunks", f"the chunked body is longer than ds4ci's cap of {BODY_KEEP_BYTES} bytes", b"y"),
        ("huge_length", f"the body is longer than ds4ci's cap of {BODY_KEEP_BYTES} bytes (Content-Length 99999999999)",
         b"z"),
        ("unframed", f"the body is longer than ds4ci's cap of {BODY_KEEP_BYTES} bytes (more came unframed)", b"w"),
    ],
)
def test_an_endless_body_stops_at_the_cap_and_says_so(
    request: pytest.FixtureRequest, name: str, said: str, byte: bytes
) -> None:
    port, _ = request.getfixturevalue(name)
    answer = exchange(port, "GET", "/props", 30.0)
    assert answer.body is None and answer.malformed is not None and answer.malformed.startswith(said), answer.malformed
    assert answer.raw == byte * BODY_KEEP_BYTES  # what came, up to the cap, kept as evidence


def test_endless_headers_stop_at_the_line_cap(endless_header: tuple[int, list[int]]) -> None:
    port, _ = endless_header
    with pytest.raises(BrokenAnswer, match=r"headers: a line longer than ds4ci's cap of 8192 bytes \(found 'X-Pad: ppp"):
        exchange(port, "GET", "/props", 30.0)


def test_a_props_answer_with_chunk_size_minus_one_is_no_verdict_naming_what_was_found(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    run = ws.gate(widths="2", env=ws.env(FOREIGN_BEHAVIOUR="endless-props"), timeout=120)
    assert run.code == 3, run.stdout + run.stderr
    assert ("target-only: GET /props failed: BrokenAnswer: expected a chunk size in hexadecimal digits, found '-1'"
            in run.reasons()), run.reasons()
    assert "MemoryError" not in run.reasons() and "internal error" not in run.reasons()


def test_a_server_that_dies_answering_props_is_said_to_have_exited_with_its_abort_line(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    run = ws.gate(widths="2", env=ws.env(FOREIGN_BEHAVIOUR="crash-on-props"), timeout=120)
    assert run.code == 3, run.stdout + run.stderr
    first = run.reasons().splitlines()[0]
    assert first.startswith("target-only: GET /props failed: ") and "(server exited with code 9)" in first, first
    assert first.endswith(": GGML_ASSERT(props) failed: foreign crash on /props"), first
