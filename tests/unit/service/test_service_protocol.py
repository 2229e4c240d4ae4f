"""The gate service's frames and request over a real socket pair: caps, strictness, the one verb."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading
from pathlib import Path

import pytest

from ds4ci.service import protocol
from ds4ci.service.protocol import FrameError, RequestRefused

SHA = "a" * 40
GOOD = {"protocol": protocol.PROTOCOL, "verb": "gate", "checkout": "/srv/repo", "head": SHA, "base": "b" * 64,
        "runner": "box", "widths": [2, 3]}


def test_a_valid_request_round_trips() -> None:
    request = protocol.parse_request(GOOD)
    assert request.widths == (2, 3) and protocol.parse_request(request.doc()) == request


@pytest.mark.parametrize(("change", "said"), [
    ({"verb": "sign"}, "never signs"),
    ({"protocol": "ds4ci-gate/2"}, "speaks ds4ci-gate/1"),
    ({"head": "abc"}, "full commit SHA"),
    ({"head": SHA.upper()}, "full commit SHA"),
    ({"checkout": "relative/path"}, "absolute path"),
    ({"checkout": "/a\nb"}, "absolute path"),
    ({"runner": "../x"}, "runner"),
    ({"widths": [2, 2]}, "twice"),
    ({"key": "/etc/ds4ci/runner-key.pem"}, "unknown keys"),
])
def test_a_bad_field_is_refused_saying_what_was_expected(change: dict[str, object], said: str) -> None:
    with pytest.raises(RequestRefused, match=said):
        protocol.parse_request({**GOOD, **change})


def test_a_request_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(RequestRefused, match="JSON object"):
        protocol.parse_request([GOOD])


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    return a, b


def test_a_frame_over_the_cap_is_refused_before_its_body_is_read() -> None:
    a, b = _pair()
    with a, b:
        a.sendall(struct.pack(">I", 1 << 31))
        with pytest.raises(FrameError, match="over the 100-byte cap"):
            protocol.recv_frame(b, 100)


def test_a_short_frame_and_bad_json_end_the_conversation() -> None:
    a, b = _pair()
    with a, b:
        a.sendall(struct.pack(">I", 10) + b"abc")
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(FrameError, match="closed after 3 of 10 bytes"):
            protocol.recv_frame(b, 100)
    for payload, said in ((b"[1]", "JSON object"), (b'{"a": NaN}', "non-standard"), (b"\xff", "not UTF-8")):
        a, b = _pair()
        with a, b:
            protocol.send_frame(a, payload)
            with pytest.raises(FrameError, match=said):
                protocol.recv_json(b, 100)


def test_a_frame_that_trickles_past_its_deadline_is_refused() -> None:
    import time

    a, b = _pair()
    with a, b:
        a.sendall(struct.pack(">I", 10) + b"ab")  # the rest never comes
        with pytest.raises(FrameError, match="2 of 10 bytes came before the deadline"):
            protocol.recv_frame(b, 100, deadline=time.monotonic() + 0.3)


def test_a_file_travels_whole_and_is_checked_against_its_trailer(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # more than one data frame
    path = tmp_path / "bundle"
    path.write_bytes(data)
    a, b = _pair()
    with a, b:
        sender = threading.Thread(target=protocol.send_file, args=(a, "bundle", path))
        sender.start()
        header = protocol.recv_json(b, 1000)
        out = io.BytesIO()
        assert protocol.recv_file(b, header, len(data), out) == "bundle"
        sender.join()
    assert out.getvalue() == data


def test_a_file_over_the_cap_or_with_a_wrong_trailer_is_refused() -> None:
    a, b = _pair()
    with a, b, pytest.raises(FrameError, match="over the 10-byte cap"):
        protocol.recv_file(b, {"file": "bundle", "size": 11}, 10, io.BytesIO())
    a, b = _pair()
    with a, b:
        protocol.send_frame(a, b"12345")
        protocol.send_json(a, {"end": "bundle", "sha256": "0" * 64})
        with pytest.raises(FrameError, match="does not match"):
            protocol.recv_file(b, {"file": "bundle", "size": 5}, 10, io.BytesIO())


def test_answers_are_sorted_json_objects() -> None:
    a, b = _pair()
    with a, b:
        protocol.send_json(a, {"status": "busy", "protocol": protocol.PROTOCOL})
        (size,) = struct.unpack(">I", b.recv(4))
        assert json.loads(b.recv(size)) == {"protocol": protocol.PROTOCOL, "status": "busy"}
