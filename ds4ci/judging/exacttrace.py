"""The exact-differential trace (``lucebox.ds4.exact-diff/v1``): each request's generated token IDs.

DFLASH-era builds with its writer append one JSON object per line to the file that
``DFLASH_DS4_EXACT_TRACE_PATH`` names (``DFLASH_DS4_EXACT_TRACE_Q``, 1..4, must be set too, or the
writer stays off). A process writes one ``model_config`` record first; then, per request, numbered
from 0 in the order the process served them, a ``request_start``, diagnostic records of that
request (``step``, ``layer``, ``capture``, ``logits``, ``snapshot_save``, ``snapshot_restore``,
``reset``), and at the end one ``tokens`` record (``token_ids``: the generated tokens) directly
followed by one ``request_end`` (``ok``). The gate gives each server a fresh file, so anything else
(another order, a second ``tokens``, a request without one, a line that is not strict JSON) is
refused with the line that broke the rule. The file is PR data: read through ``confined``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ds4ci.judging import confined, strictjson

SCHEMA: Final = "lucebox.ds4.exact-diff/v1"
EVIDENCE_NAME: Final = "exact-trace.jsonl"  # where the gate seals a server's trace, beside its logs
MAX_TRACE_BYTES: Final = 64 * 1024 * 1024  # a trace with per-layer records of a few short requests
# What the gate records of the file in the server's lifecycle (``exact_trace``): collected, "absent (why)" or
# "refused: why"; a refusal makes that arm an error (judge.lifecycle_issues).
COLLECTED: Final = "collected"
REFUSED: Final = "refused"
_INNER: Final = frozenset({"step", "layer", "capture", "logits", "snapshot_save", "snapshot_restore", "reset"})
_INT32 = range(-(2**31), 2**31)


@dataclass(frozen=True)
class TracedRequest:
    """One request's ``tokens`` record: its number, the line it is on, the IDs, and its ``request_end`` ok."""

    request: int
    line: int
    token_ids: tuple[int, ...]
    ok: bool


@dataclass(frozen=True)
class ExactTrace:
    """The requests of one server's trace, in order, or the first rule it broke (then no requests)."""

    requests: tuple[TracedRequest, ...]
    problem: str | None = None


class _Broken(Exception):
    pass


def _shown(value: object) -> str:
    """A found value as JSON writes it (``true``, ``"a"``, ``null``), shortened."""
    return json.dumps(value)[:40]


def _int(record: dict[str, Any], name: str) -> int:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Broken(f"expected an integer {name}, found {_shown(value)}")
    return value


def _token_ids(record: dict[str, Any]) -> tuple[int, ...]:
    ids = record.get("token_ids")
    if not isinstance(ids, list):
        raise _Broken(f"expected a token_ids list, found {_shown(ids)}")
    bad = next((i for i in ids if isinstance(i, bool) or not isinstance(i, int) or i not in _INT32), None)
    if bad is not None:
        raise _Broken(f"token_ids holds {_shown(bad)}, not a 32-bit integer")
    return tuple(ids)


class _Reader:
    """The record order, one line at a time."""

    def __init__(self) -> None:
        self.requests: list[TracedRequest] = []
        self.current: int | None = None  # the request between its request_start and request_end
        self.tokens: TracedRequest | None = None  # its tokens record, which request_end must follow at once

    def feed(self, number: int, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if record.get("schema") != SCHEMA:
            raise _Broken(f"expected schema {SCHEMA!r}, found {_shown(record.get('schema'))}")
        if kind == "model_config":
            if number != 1:
                raise _Broken("a model_config record after the first line (one server process writes one, first)")
            return
        if number == 1:
            raise _Broken(f"expected the model_config record first, found {str(kind)[:40]!r}")
        if self.tokens is not None and kind != "request_end":
            raise _Broken(f"expected the request_end of request {self.tokens.request} right after its tokens record, "
                          f"found {str(kind)[:40]!r}")
        if kind == "request_start":
            self._start(_int(record, "request"))
        elif kind in _INNER or kind in ("tokens", "request_end"):
            self._inside(kind, record, number)
        else:
            raise _Broken(f"unknown record type {str(kind)[:40]!r}")

    def _start(self, request: int) -> None:
        if self.current is not None:
            raise _Broken(f"request_start of request {request} while request {self.current} has no request_end")
        if request != len(self.requests):
            raise _Broken(f"request_start of request {request}; expected request {len(self.requests)} (numbered from "
                          "0 in the order served)")
        self.current = request

    def _inside(self, kind: str, record: dict[str, Any], number: int) -> None:
        request = _int(record, "request")
        if self.current is None:
            raise _Broken(f"a {kind} record of request {request} outside any request (after its request_end or "
                          "before its request_start)")
        if request != self.current:
            raise _Broken(f"a {kind} record of request {request} inside request {self.current}")
        if kind == "tokens":
            self.tokens = TracedRequest(request, number, _token_ids(record), False)
        elif kind == "request_end":
            if self.tokens is None:
                raise _Broken(f"request_end of request {request} without its tokens record")
            ok = record.get("ok")
            if not isinstance(ok, bool):
                raise _Broken(f"expected ok true or false, found {_shown(ok)}")
            self.requests.append(TracedRequest(request, self.tokens.line, self.tokens.token_ids, ok))
            self.current, self.tokens = None, None


def parse(data: bytes, where: str) -> ExactTrace:
    """The trace's requests, or the first line that breaks the format (named, with what was expected)."""
    if not data:
        return ExactTrace((), f"{where} is empty; expected a model_config record first")
    if not data.endswith(b"\n"):
        return ExactTrace((), f"{where}: the last line is not complete (no newline): the trace was cut off")
    reader = _Reader()
    for number, line in enumerate(data[:-1].split(b"\n"), 1):
        try:
            record = strictjson.loads(line, f"line {number}")
            if not isinstance(record, dict):
                raise _Broken(f"expected a JSON object, found {type(record).__name__}")
            reader.feed(number, record)
        except (strictjson.StrictJsonError, _Broken) as exc:
            return ExactTrace((), f"{where} line {number}: {str(exc)[:300]}")
    if reader.current is not None:
        return ExactTrace((), f"{where}: request {reader.current} has no request_end (the trace ends inside it)")
    return ExactTrace(tuple(reader.requests))


def read(root: Path, rel: str) -> ExactTrace:
    """A sealed trace, read through ``confined`` (no link, a regular file, at most MAX_TRACE_BYTES)."""
    try:
        data = confined.read_bytes(root, rel, MAX_TRACE_BYTES)
    except confined.ConfinedError as exc:
        return ExactTrace((), f"{rel}: {exc}")
    return parse(data, rel)


def for_server(root: Path, rel: str, sent: int, collected: object) -> tuple[tuple[TracedRequest, ...], str | None]:
    """One server's traced requests, one per request sent, in the order sent (requests are serialized), or
    none and why; ``collected`` is what the gate recorded of the file (``lifecycle.json`` exact_trace)."""
    if not os.path.lexists(root / rel):
        return (), (f"no exact-differential trace was collected from this server ({str(collected or 'not set')[:200]}), "
                    "while another arm's was: every arm must write one")
    trace = read(root, rel)
    if trace.problem is not None:
        return (), trace.problem
    if len(trace.requests) != sent:
        return (), f"{rel} records {len(trace.requests)} request(s); {sent} were sent to this server, one at a time"
    return trace.requests, None
