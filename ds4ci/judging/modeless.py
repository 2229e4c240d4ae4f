"""Builds without the reference-exact mode, and what their answers still show.

A build that has no reference-exact mode prints no ``[ds4-exact-verify-trace]`` line, no
reference-exact banner and no ``[ds4-spec]`` summary with matched/offered counters in any arm (a
counterless summary alone is printed by every speculative build, with the mode or without). The
gate cannot judge such a build: ``no_mode_reason`` says so in one reason (verdict error, exit 3;
docs/protocol.md).

Even then the per-width cells still say, with the tiny models' words as the oracle, whether the
build's speculation answered what target-only answered (``judge``); the verdict stays error.
A server that prints no DS4 line at all (no ``[ds4...`` or ``[deepseek4...`` line in any arm: it answers the HTTP
API, but is not an engine that speaks the protocol) gets the one reason ``SILENT`` instead, and no parity oracle:
its answers are never shown as a parity ratio.

It reads only sealed files of the attempt: the servers' logs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ds4ci.judging import confined, exacttrace
from ds4ci.judging.protocol import BANNER, MALFORMED, SUMMARY, TRACE, TRACE_TAG, LogRecord, prints_ds4_line, scan_log

NO_MODE = (
    "the server printed no reference-exact trace and no reference-exact banner in any arm, and its summaries carry "
    "no matched/offered counters: this build has no reference-exact mode; the gate cannot judge it"
)
SILENT = (
    "this server does not print the DS4 reference-exact protocol (expected [ds4-exact-verify-trace] and [ds4-spec] "
    "lines, or at least the engine's [deepseek4] lines, on stderr or stdout; no arm's log holds a line tagged [ds4-... or "
    "[deepseek4...]): it answers the HTTP API, but the gate cannot judge it. docs/protocol.md says what a server must "
    "print, which environment variables it must read and which endpoints it must answer"
)
_STREAMS = ("stderr", "stdout")
_SCAN_LIMIT = 1 << 16


def _records(attempt: Path, key: str) -> list[LogRecord] | None:
    """The arm's trusted records on both streams, or None when a log cannot be read (the judge reports it)."""
    found: list[LogRecord] = []
    for stream in _STREAMS:
        path = attempt / "servers" / key / f"{stream}.log"
        try:
            found += scan_log(path, stream, _SCAN_LIMIT, root=attempt).records
        except (confined.ConfinedError, OSError):
            return None
    return found


def _carries_mode(attempt: Path, key: str) -> bool:
    records = _records(attempt, key)
    if records is None:
        return True  # an unreadable log is not evidence of a missing mode; the judge reports it
    return any(
        record.kind in (TRACE, BANNER)
        or (record.kind == SUMMARY and record.summary is not None and record.summary.matched is not None)
        or (record.kind == MALFORMED and _claims_mode(record.text))
        for record in records
    )


def _claims_mode(text: str) -> bool:
    """A malformed line still claims the mode when it is a trace or a summary that names a counter."""
    return text.startswith(TRACE_TAG) or "matched=" in text or "offered=" in text


def prints_trace(attempt: Path, keys: Sequence[str]) -> bool:
    """Whether any arm printed a ``[ds4-exact-verify-trace]`` line (well-formed or not): the strict dialect."""
    for key in keys:
        records = _records(attempt, key) or []
        if any(r.kind == TRACE or (r.kind == MALFORMED and r.text.startswith(TRACE_TAG)) for r in records):
            return True
    return False


def no_mode_reason(attempt: Path, keys: Sequence[str]) -> str | None:
    """The one reason when none of the arms ``keys`` printed a trace or a countered summary, else None."""
    if not keys or any(_carries_mode(attempt, key) for key in keys):
        return None
    return NO_MODE


def prints_ds4(attempt: Path, keys: Sequence[str]) -> bool:
    """Whether any arm of ``keys`` that ran printed a DS4 line (``protocol.DS4_TAGS``) on either stream. An arm
    that never ran is no evidence; an unreadable log is no evidence of silence (the judge reports it)."""
    for key in keys:
        if not (attempt / "servers" / key).is_dir():
            continue
        for stream in _STREAMS:
            try:
                if prints_ds4_line(attempt / "servers" / key / f"{stream}.log", attempt):
                    return True
            except (confined.ConfinedError, OSError):
                return True
    return False


def speaks_protocol(attempt: Path, keys: Sequence[str]) -> bool:
    """Whether the server shows any sign of the DS4 protocol: a DS4 line in some arm's log, or an exact-differential
    trace file in some arm (``SILENT`` when neither)."""
    traced = any(os.path.lexists(attempt / "servers" / key / exacttrace.EVIDENCE_NAME) for key in keys)
    return traced or prints_ds4(attempt, keys)


def run_reason(attempt: Path, keys: Sequence[str]) -> str | None:
    """The run's one reason for a server that cannot be judged for want of the protocol: ``SILENT`` where no arm
    printed a DS4 line, ``NO_MODE`` where it printed no reference-exact one; None when it has the mode."""
    return SILENT if not speaks_protocol(attempt, keys) else no_mode_reason(attempt, keys)
