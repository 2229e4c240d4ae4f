"""An HTTP/1.1 answer read from a socket with byte caps of ds4ci's own, never the server's framing.

``http.client`` believes what the answer declares: a chunk size of ``-1`` makes it read to the end of
the stream, so a server that sends one and then bytes without end fills ds4ci's memory. This reader
parses the status line, the headers and the body itself, and every read is bounded by a cap that
ds4ci sets:

- the status line and each header line at most :data:`LINE_BYTES`, all headers together at most
  :data:`HEAD_BYTES` and :data:`MAX_HEADERS` lines;
- the body at most ``cap`` bytes, whether it is framed by ``Content-Length``, by chunks or by the end
  of the connection: reading stops at the cap, and what came is kept with a reason that names the cap
  and what was found;
- a chunk size is hexadecimal digits only (at most 16), a ``Content-Length`` decimal digits only.

Anything else is a :class:`BrokenAnswer` (an ``HTTPException``) that says what was expected and
what was found. The request asks for ``Connection: close`` and ``Accept-Encoding: identity``.
"""

from __future__ import annotations

import http.client
import re
import socket
from dataclasses import dataclass

LINE_BYTES = 8 * 1024
HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
_RECV = 64 * 1024
_STATUS = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: [^\r\n]*)?")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DIGITS = re.compile(rb"[0-9]{1,19}")


class BrokenAnswer(http.client.HTTPException):
    """An answer ds4ci does not read further: the message says what was expected and what was found."""


@dataclass(frozen=True)
class RawAnswer:
    status: int
    body: bytes  # at most the cap
    over_cap: str | None = None  # why the body was not read whole (it is longer than the cap); None: it is whole


def _shown(data: bytes) -> str:
    return repr(data[:80])[1:] + ("…" if len(data) > 80 else "")


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.closed = False

    def _fill(self) -> bool:
        if self.closed:
            return False
        data = self.sock.recv(_RECV)
        if not data:
            self.closed = True
            return False
        self.buffer += data
        return True

    def line(self, what: str) -> bytes:
        """One CRLF-ended line (LF alone is taken too), at most LINE_BYTES."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                if end + 1 > LINE_BYTES:
                    break
                found, self.buffer = self.buffer[:end], self.buffer[end + 1 :]
                return found.removesuffix(b"\r")
            if len(self.buffer) > LINE_BYTES:
                break
            if not self._fill():
                raise BrokenAnswer(f"the connection closed inside the {what} (found {_shown(self.buffer)})")
        raise BrokenAnswer(f"{what}: a line longer than ds4ci's cap of {LINE_BYTES} bytes (found {_shown(self.buffer)})")

    def take(self, count: int, what: str) -> bytes:
        """Exactly ``count`` bytes (the caller bounds ``count``)."""
        while len(self.buffer) < count:
            if not self._fill():
                raise BrokenAnswer(f"the connection closed inside the {what} ({len(self.buffer)} of {count} bytes came)")
        found, self.buffer = self.buffer[:count], self.buffer[count:]
        return found

    def upto(self, limit: int) -> bytes:
        """What comes until the connection closes, at most ``limit`` bytes."""
        while len(self.buffer) < limit and self._fill():
            pass
        found, self.buffer = self.buffer[:limit], self.buffer[limit:]
        return found


def request_bytes(method: str, path: str, host: str, body: bytes | None) -> bytes:
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close", "Accept-Encoding: identity"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + (body or b"")


def _head(reader: _Reader) -> tuple[int, dict[bytes, list[bytes]]]:
    while True:  # an interim 1xx answer is followed by the real one
        first = reader.line("status line")
        match = _STATUS.fullmatch(first)
        if match is None:
            raise BrokenAnswer(f"expected a status line such as 'HTTP/1.1 200 OK', found {_shown(first)}")
        headers: dict[bytes, list[bytes]] = {}
        size, count = len(first), 0
        while line := reader.line("headers"):
            size, count = size + len(line), count + 1
            if size > HEAD_BYTES or count > MAX_HEADERS:
                raise BrokenAnswer(f"the headers pass ds4ci's cap of {HEAD_BYTES} bytes or {MAX_HEADERS} lines")
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise BrokenAnswer(f"expected a header 'Name: value', found {_shown(line)}")
            headers.setdefault(name.lower(), []).append(value.strip())
        status = int(match.group(1))
        if status >= 200:
            return status, headers


def _chunked(reader: _Reader, cap: int) -> RawAnswer | bytes:
    body = b""
    while True:
        line = reader.line("chunk size line")
        size_text = line.split(b";", 1)[0].strip()
        if _HEX.fullmatch(size_text) is None:
            raise BrokenAnswer(f"expected a chunk size in hexadecimal digits, found {_shown(size_text)}")
        size = int(size_text, 16)
        if size == 0:
            break
        if len(body) + size > cap:
            kept = body + reader.take(min(size, cap - len(body)), "chunk")
            return RawAnswer(0, kept, f"the chunked body is longer than ds4ci's cap of {cap} bytes "
                                      f"(a chunk of {size} bytes after {len(body)})")
        body += reader.take(size, "chunk")
        if reader.line("chunk's end") != b"":
            raise BrokenAnswer("expected CRLF after a chunk's bytes, found more bytes")
    for _ in range(MAX_HEADERS):  # the trailer, ended by an empty line
        if reader.line("trailer") == b"":
            return body
    raise BrokenAnswer(f"the trailer passes ds4ci's cap of {MAX_HEADERS} lines")


def _body(reader: _Reader, status: int, headers: dict[bytes, list[bytes]], cap: int) -> RawAnswer:
    if status in (204, 304):
        return RawAnswer(status, b"")
    coding = b",".join(headers.get(b"transfer-encoding", [])).lower()
    if coding:
        if [c.strip() for c in coding.split(b",")] != [b"chunked"]:
            raise BrokenAnswer(f"expected Transfer-Encoding: chunked or none, found {_shown(coding)}")
        got = _chunked(reader, cap)
        return RawAnswer(status, got.body, got.over_cap) if isinstance(got, RawAnswer) else RawAnswer(status, got)
    lengths = {v.strip() for value in headers.get(b"content-length", []) for v in value.split(b",")}
    if lengths:
        declared = lengths.pop()
        if lengths or _DIGITS.fullmatch(declared) is None:
            raise BrokenAnswer(f"expected one Content-Length in decimal digits, found {_shown(b', '.join([declared, *lengths]))}")
        size = int(declared)
        if size > cap:  # its first bytes are kept, as far as they come
            return RawAnswer(status, reader.upto(cap), f"the body is longer than ds4ci's cap of {cap} bytes "
                                                       f"(Content-Length {size})")
        return RawAnswer(status, reader.take(size, "body"))
    body = reader.upto(cap + 1)  # framed by the end of the connection
    if len(body) > cap:
        return RawAnswer(status, body[:cap], f"the body is longer than ds4ci's cap of {cap} bytes (more came unframed)")
    return RawAnswer(status, body)


def read_answer(sock: socket.socket, cap: int) -> RawAnswer:
    """The answer on ``sock`` (its request sent), the body read to at most ``cap`` bytes."""
    reader = _Reader(sock)
    status, headers = _head(reader)
    return _body(reader, status, headers, cap)
