"""One HTTP/1.1 exchange with the server on loopback: a fresh connection, one deadline for all of it,
and the answer read with ds4ci's own caps (``http11``), never the server's framing."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ds4ci.errors import NoVerdictError
from ds4ci.gate import http11
from ds4ci.judging import strictjson

HOST = "127.0.0.1"
BODY_KEEP_BYTES = 64 * 1024  # an error answer's body kept in the evidence
_BODY_QUOTE_CHARS = 300  # and quoted in the reason


@dataclass(frozen=True)
class Answer:
    status_code: int
    body: Any  # the parsed JSON, None when it is not JSON
    raw: bytes = b""  # the body as received (at most BODY_KEEP_BYTES)
    malformed: str | None = None  # why the body is not strict JSON (None: it is)


class HttpAnswerError(NoVerdictError):
    """The server answered a completion request, but not with 200 and JSON; ``raw`` is the body it sent."""

    def __init__(self, message: str, status_code: int, raw: bytes) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.raw = raw


def quote_body(raw: bytes) -> str:
    """The start of an answer's body on one line, for a reason."""
    if not raw:
        return "an empty body"
    text = " ".join(raw[: _BODY_QUOTE_CHARS * 4].decode("utf-8", errors="replace").split())
    cut = "…" if len(text) > _BODY_QUOTE_CHARS or len(raw) > _BODY_QUOTE_CHARS * 4 else ""
    return f"body ({len(raw)} bytes kept): {text[:_BODY_QUOTE_CHARS]}{cut}"


class _DeadlineSocket(socket.socket):
    """A TCP socket whose every send and receive waits at most until one deadline for the whole exchange.

    ``settimeout`` alone bounds each socket operation: an answer dripped one byte at a time would
    never time out. Before each operation the timeout is set to what is left of the deadline.
    """

    deadline = 0.0

    def _left(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the whole exchange took longer than its deadline")
        self.settimeout(left)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._left()
        super().sendall(data, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._left()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._left()
        return super().recv(bufsize, flags)


NewSocket = Callable[[], socket.socket]


def _connect(port: int, deadline: float, new_socket: NewSocket | None) -> _DeadlineSocket:
    made = new_socket().detach() if new_socket is not None else None  # inside the server's own network namespace
    sock = _DeadlineSocket(socket.AF_INET, socket.SOCK_STREAM, fileno=made)
    sock.deadline = deadline
    try:
        sock._left()
        sock.connect((HOST, port))
    except BaseException:
        sock.close()
        raise
    return sock


def exchange(
    port: int, method: str, path: str, timeout_s: float, body: dict[str, Any] | None = None,
    new_socket: NewSocket | None = None,
) -> Answer:
    """One HTTP/1.1 request to the server on loopback over a fresh connection (never through a proxy).

    ``timeout_s`` is a deadline for the whole exchange (connect, request, every byte of the answer), read
    by ``http11`` (ds4ci's caps, never the server's framing). ``new_socket`` makes the socket inside the
    server's own network namespace (None: the host's loopback). Raises OSError (TimeoutError past the
    deadline) or HTTPException (``http11.BrokenAnswer``: a framing ds4ci refuses).
    """
    data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
    with _connect(port, time.monotonic() + timeout_s, new_socket) as sock:
        sock.sendall(http11.request_bytes(method, path, f"{HOST}:{port}", data))
        answer = http11.read_answer(sock, BODY_KEEP_BYTES)
    if answer.over_cap is not None:
        return Answer(answer.status, None, answer.body, answer.over_cap)
    try:
        return Answer(answer.status, strictjson.loads(answer.body, "the body"), answer.body)
    except strictjson.StrictJsonError as exc:  # not UTF-8, not JSON, NaN, too deep, a duplicated key
        return Answer(answer.status, None, answer.body, str(exc)[:300])
