"""The gate service's wire protocol (version ``ds4ci-gate/1``): frames, the request, the answers.

Every frame is a 4-byte big-endian length and that many bytes. Control frames are one strict JSON
object each (``ds4ci.judging.strictjson``: no duplicate keys, no NaN, bounded nesting); a file
travels as a JSON header ``{"file": NAME, "size": N}``, raw data frames of at most :data:`CHUNK`
bytes until N bytes came, and a JSON trailer ``{"end": NAME, "sha256": HEX}``. Every read has a cap
chosen by the reader before the length is read: a frame over it, a short read or a malformed object
ends the conversation (fail closed), never a partial answer taken as whole.

The one request names a commit to gate; there is no verb that signs bytes a caller sends.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from ds4ci.errors import Ds4ciError, UsageError
from ds4ci.judging.strictjson import StrictJsonError, loads
from ds4ci.options.values import parse_widths, runner_name

PROTOCOL: Final = "ds4ci-gate/1"
VERB: Final = "gate"
HEADER: Final = struct.Struct(">I")
MAX_REQUEST: Final = 64 * 1024  # the service's cap on the one request frame
MAX_CONTROL: Final = 1024 * 1024  # the client's cap on each answer frame
CHUNK: Final = 1024 * 1024
MAX_PATH: Final = 4096
_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
REQUEST_KEYS: Final = frozenset({"protocol", "verb", "checkout", "head", "base", "runner", "widths"})
STATUSES: Final = ("queued", "running", "done", "busy", "refused", "error")


class FrameError(Ds4ciError):
    """A frame over its cap, cut short or malformed: the conversation ends (exit 3 for the client)."""


class RequestRefused(UsageError):
    """A request the service will not run (bad field, unknown runner, wrong protocol): exit 2."""


@dataclass(frozen=True)
class GateRequest:
    """What a caller may choose: where to fetch from, which commits, which runner, which widths. Nothing else."""

    checkout: str
    head: str
    base: str
    runner: str
    widths: tuple[int, ...] | None = None

    def doc(self) -> dict[str, Any]:
        return {"protocol": PROTOCOL, "verb": VERB, "checkout": self.checkout, "head": self.head,
                "base": self.base, "runner": self.runner,
                "widths": list(self.widths) if self.widths is not None else None}


def _sha(doc: Mapping[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not _SHA.match(value):
        raise RequestRefused(f"{key}: expected a full commit SHA (40 or 64 lowercase hex digits), found {value!r:.80}")
    return value


def parse_request(doc: Any) -> GateRequest:
    """The request frame's object, checked field by field; RequestRefused says what was expected and found."""
    if not isinstance(doc, dict):
        raise RequestRefused(f"request: expected a JSON object, found {type(doc).__name__}")
    if doc.get("protocol") != PROTOCOL:
        raise RequestRefused(f"protocol: this service speaks {PROTOCOL}, the request says {doc.get('protocol')!r:.80}")
    if doc.get("verb") != VERB:
        raise RequestRefused(f"verb: the service only gates a commit (verb {VERB!r}); it never signs bytes a caller "
                             f"sends; found {doc.get('verb')!r:.80}")
    unknown = sorted(set(doc) - REQUEST_KEYS)
    if unknown:
        raise RequestRefused(f"request: unknown keys {', '.join(repr(k[:40]) for k in unknown[:5])}; expected only "
                             f"{', '.join(sorted(REQUEST_KEYS))}")
    checkout = doc.get("checkout")
    if (not isinstance(checkout, str) or not checkout.startswith("/") or len(checkout) > MAX_PATH
            or any(c in checkout for c in "\0\n\r")):
        raise RequestRefused(f"checkout: expected an absolute path of a git repository, found {checkout!r:.200}")
    widths = doc.get("widths")
    try:
        return GateRequest(
            checkout=checkout, head=_sha(doc, "head"), base=_sha(doc, "base"),
            runner=runner_name(doc.get("runner"), "runner"),
            widths=None if widths is None else parse_widths(widths, "widths"),
        )
    except RequestRefused:
        raise
    except UsageError as exc:
        raise RequestRefused(str(exc)) from exc


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(HEADER.pack(len(payload)) + payload)


def send_json(sock: socket.socket, doc: Mapping[str, Any]) -> None:
    send_frame(sock, json.dumps(doc, sort_keys=True).encode("utf-8"))


def _recv_exact(sock: socket.socket, size: int, what: str, deadline: float | None = None) -> bytes:
    """``size`` bytes; with ``deadline`` (time.monotonic()) all of them by then, however slowly they trickle in."""
    parts, left = [], size
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FrameError(f"{what}: {size - left} of {size} bytes came before the deadline")
            sock.settimeout(remaining)
        try:
            got = sock.recv(min(left, CHUNK))
        except TimeoutError as exc:
            raise FrameError(f"{what}: {size - left} of {size} bytes came before the deadline") from exc
        if not got:
            raise FrameError(f"{what}: the connection closed after {size - left} of {size} bytes")
        parts.append(got)
        left -= len(got)
    return b"".join(parts)


def recv_frame(sock: socket.socket, cap: int, what: str = "frame", deadline: float | None = None) -> bytes:
    """One frame of at most ``cap`` bytes; FrameError on a longer one (nothing of it is read), a short read or,
    with ``deadline``, one not whole by then."""
    (size,) = HEADER.unpack(_recv_exact(sock, HEADER.size, what, deadline))
    if size > cap:
        raise FrameError(f"{what}: a frame of {size} bytes, over the {cap}-byte cap")
    return _recv_exact(sock, size, what, deadline)


def recv_json(sock: socket.socket, cap: int, what: str = "frame", deadline: float | None = None) -> dict[str, Any]:
    try:
        doc = loads(recv_frame(sock, cap, what, deadline), what)
    except StrictJsonError as exc:
        raise FrameError(str(exc)) from exc
    if not isinstance(doc, dict):
        raise FrameError(f"{what}: expected a JSON object, found {type(doc).__name__}")
    return doc


def send_file(sock: socket.socket, name: str, path: Path) -> None:
    """``path``'s bytes as one file transfer (header, data frames, trailer with the SHA-256 of what was sent)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        size = _size(fh)
        send_json(sock, {"file": name, "size": size})
        left = size
        while left:
            block = fh.read(min(CHUNK, left))
            if not block:
                raise OSError(f"{path} shrank while it was sent")
            digest.update(block)
            send_frame(sock, block)
            left -= len(block)
    send_json(sock, {"end": name, "sha256": digest.hexdigest()})


def _size(fh: BinaryIO) -> int:
    return os.fstat(fh.fileno()).st_size


def recv_file(sock: socket.socket, header: Mapping[str, Any], cap: int, out: BinaryIO) -> str:
    """Receive the file ``header`` announced into ``out``, at most ``cap`` bytes; its name. FrameError on a
    size over the cap, a data frame past the size, or a trailer whose name or SHA-256 does not match."""
    name, size = header.get("file"), header.get("size")
    if not isinstance(name, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise FrameError(f"file header: expected a name and a size, found {dict(header)!r:.200}")
    if size > cap:
        raise FrameError(f"file {name}: {size} bytes announced, over the {cap}-byte cap")
    digest, left = hashlib.sha256(), size
    while left:
        block = recv_frame(sock, min(CHUNK, left), f"file {name}")
        if not block:
            raise FrameError(f"file {name}: an empty data frame with {left} bytes still to come")
        digest.update(block)
        out.write(block)
        left -= len(block)
    trailer = recv_json(sock, MAX_CONTROL, f"file {name} trailer")
    if trailer != {"end": name, "sha256": digest.hexdigest()}:
        raise FrameError(f"file {name}: the trailer {trailer!r:.200} does not match the {size} bytes received "
                         f"(sha256 {digest.hexdigest()})")
    return name
