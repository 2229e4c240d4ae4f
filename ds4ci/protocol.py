"""Parsing the server's per-request log into typed records, and the first-mismatch diff.

Only three line families are trusted (design.md section 2); their formats are exact. Every other
line, ``[ds4-spec-t]`` timing traces included, is ignored. A line that starts like a trusted one
but does not parse is never skipped silently: it becomes a *problem* that fails the request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TRACE_TAG = "[ds4-exact-verify-trace]"
BANNER_PREFIX = "[ds4-spec] reference-exact verifier:"
SUMMARY_PREFIX = "[ds4-spec] gen="

_TRACE = re.compile(r"reference_exact=(\d+) speculation=(\d+) n=(\d+) ids=\[([^\]]*)\]")
_FIELD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
_UINT = re.compile(r"^[0-9]+$")
_RATIO = re.compile(r"^[0-9]+/[0-9]+$")
_SUMMARY_REQUIRED = ("gen", "steps", "matched", "offered", "mean_accept", "q_cap", "full_snap")
MAX_IDS_PER_TRACE = 1_000_000
# One request has one trace and one summary; a flood is kept bounded in memory (and fails the gate).
MAX_RECORDS_PER_REQUEST = 64


@dataclass(frozen=True)
class Trace:
    reference_exact: int
    speculation: int
    n: int
    ids: tuple[int, ...]


@dataclass(frozen=True)
class SpecSummary:
    gen: int
    steps: int
    matched: int
    offered: int
    mean_accept: str
    q_cap: int
    full_snap: int
    extra: tuple[tuple[str, str], ...] = ()

    def counters(self) -> tuple[int, int, int, int, int, int]:
        return (self.gen, self.steps, self.matched, self.offered, self.q_cap, self.full_snap)


@dataclass(frozen=True)
class RequestLog:
    """Everything trusted that the log gained while one request was in flight."""

    traces: tuple[Trace, ...]
    banners: int
    summaries: tuple[SpecSummary, ...]
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Mismatch:
    position: int
    window_start: int
    target_ids: tuple[int, ...]
    spec_ids: tuple[int, ...]
    target_len: int
    spec_len: int

    def describe(self) -> str:
        return (
            f"first differing position {self.position} "
            f"(target-only has {self.target_len} IDs, reference-exact {self.spec_len}); "
            f"IDs from position {self.window_start}: target-only {list(self.target_ids)} "
            f"vs reference-exact {list(self.spec_ids)}"
        )


def _short(line: str) -> str:
    return line if len(line) <= 160 else line[:157] + "..."


def parse_trace(body: str) -> Trace:
    """Parse the text after the trace tag. Raises ValueError with the reason."""
    match = _TRACE.fullmatch(body.strip())
    if match is None:
        raise ValueError("expected 'reference_exact=<0|1> speculation=<0|1> n=<N> ids=[<id> ...]'")
    ref, spec, n, raw_ids = match.groups()
    if ref not in ("0", "1") or spec not in ("0", "1"):
        raise ValueError(f"mode flags must be 0 or 1, found reference_exact={ref} speculation={spec}")
    parts = raw_ids.split()
    if len(parts) > MAX_IDS_PER_TRACE:
        raise ValueError(f"more than {MAX_IDS_PER_TRACE} IDs in one trace")
    if not all(_UINT.match(p) for p in parts):
        bad = next(p for p in parts if not _UINT.match(p))
        raise ValueError(f"token IDs must be non-negative integers, found {bad[:40]!r}")
    if raw_ids.strip() and " ".join(parts) != raw_ids.strip():
        raise ValueError("token IDs must be separated by single spaces")
    return Trace(int(ref), int(spec), int(n), tuple(int(p) for p in parts))


def parse_summary(body: str) -> SpecSummary:
    """Parse ``gen=... full_snap=...`` (text after ``[ds4-spec] ``). Extra trailing fields are kept."""
    tokens = body.split()
    fields: dict[str, str] = {}
    for token in tokens:
        match = _FIELD.fullmatch(token)
        if match is None:
            raise ValueError(f"expected key=value fields, found {token[:40]!r}")
        key, value = match.groups()
        if key in fields:
            raise ValueError(f"field {key} appears twice")
        fields[key] = value
    missing = [k for k in _SUMMARY_REQUIRED if k not in fields]
    if missing:
        raise ValueError(f"required field(s) missing: {', '.join(missing)}")
    order = [t.split("=", 1)[0] for t in tokens[: len(_SUMMARY_REQUIRED)]]
    if order != list(_SUMMARY_REQUIRED):
        raise ValueError(f"fields out of the documented order {' '.join(_SUMMARY_REQUIRED)}")
    for key in ("gen", "steps", "matched", "offered", "q_cap", "full_snap"):
        if not _UINT.match(fields[key]):
            raise ValueError(f"{key} must be a non-negative integer, found {fields[key][:40]!r}")
    if not _RATIO.match(fields["mean_accept"]):
        raise ValueError(f"mean_accept must be <a>/<b>, found {fields['mean_accept'][:40]!r}")
    if fields["full_snap"] not in ("0", "1"):
        raise ValueError(f"full_snap must be 0 or 1, found {fields['full_snap']}")
    extra = tuple((k, v) for k, v in fields.items() if k not in _SUMMARY_REQUIRED)
    return SpecSummary(
        gen=int(fields["gen"]),
        steps=int(fields["steps"]),
        matched=int(fields["matched"]),
        offered=int(fields["offered"]),
        mean_accept=fields["mean_accept"],
        q_cap=int(fields["q_cap"]),
        full_snap=int(fields["full_snap"]),
        extra=extra,
    )


def parse_request_log(lines: Iterable[str]) -> RequestLog:
    """Read one request's slice of the server log. Never raises on content: problems are returned."""
    traces: list[Trace] = []
    summaries: list[SpecSummary] = []
    problems: list[str] = []
    banners = 0
    for raw in lines:
        line = raw.rstrip("\r\n")
        if len(traces) + len(summaries) >= MAX_RECORDS_PER_REQUEST and (
            line.startswith((TRACE_TAG, SUMMARY_PREFIX))
        ):
            flood = f"more than {MAX_RECORDS_PER_REQUEST} trace/summary lines in one request; the rest were not kept"
            if flood not in problems:
                problems.append(flood)
            continue
        if line.startswith(TRACE_TAG):
            try:
                traces.append(parse_trace(line[len(TRACE_TAG):]))
            except ValueError as exc:
                problems.append(f"malformed trace line ({exc}): {_short(line)}")
        elif line.startswith(BANNER_PREFIX):
            banners += 1
        elif line.startswith("[ds4-spec] ") and "=" in line.split(" ", 2)[1]:
            # A summary-shaped line (possibly an older or broken format): it must parse in full.
            if not line.startswith(SUMMARY_PREFIX):
                problems.append(f"malformed speculation summary (expected it to start with gen=): {_short(line)}")
                continue
            try:
                summaries.append(parse_summary(line[len("[ds4-spec] "):]))
            except ValueError as exc:
                problems.append(f"malformed speculation summary ({exc}): {_short(line)}")
    return RequestLog(tuple(traces), banners, tuple(summaries), tuple(problems))


def first_mismatch(target: Sequence[int], spec: Sequence[int], context: int = 4) -> Mismatch | None:
    """The first position where two ID sequences differ (a length difference counts), or None."""
    limit = min(len(target), len(spec))
    position = next((i for i in range(limit) if target[i] != spec[i]), limit)
    if position == limit and len(target) == len(spec):
        return None
    start = max(0, position - context)
    end = position + context + 1
    return Mismatch(
        position=position,
        window_start=start,
        target_ids=tuple(target[start:end]),
        spec_ids=tuple(spec[start:end]),
        target_len=len(target),
        spec_len=len(spec),
    )
