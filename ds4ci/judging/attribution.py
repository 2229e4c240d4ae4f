"""Which trusted log records belong to which request: attribution by order over a whole server log.

The server serializes requests (one worker, first in first out), so the k-th trace and the k-th
summary of a server's log belong to its k-th request. This holds whichever stream the build
prints them on and however late after the response a line is flushed, which is why the gate
attributes only once the server has stopped and its logs are complete. Byte ranges recorded
while a request was in flight serve diagnostics only.

Anything that makes the order ambiguous fails closed: a count of traces or summaries that does
not equal the number of requests, or one record family split over two streams.

A failure line and a per-step or per-token line belong to the request whose summary follows them
on the same stream (the loop prints them before its summary); one after the last summary belongs
to no request and fails the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ds4ci.judging.protocol import (
    AR_FALLBACK_FAMILY,
    BANNER,
    FAILURE,
    MALFORMED,
    STEP,
    SUMMARY,
    SUMMARY_PREFIX,
    TOKEN,
    TRACE,
    TRACE_TAG,
    LogRecord,
    LogScan,
    RequestLog,
)
from ds4ci.judging.specsteps import SpecStep
from ds4ci.judging.steplines import TokenLine


@dataclass(frozen=True)
class ServerLog:
    """A whole server's trusted records, split per request."""

    requests: tuple[RequestLog, ...]
    banners: int
    problems: tuple[str, ...]  # server-wide: when any, the records could not all be attributed


def _slot(record: LogRecord) -> str | None:
    """TRACE or SUMMARY for records that occupy one request's slot (a malformed one too)."""
    if record.kind in (TRACE, SUMMARY):
        return record.kind
    if record.kind == MALFORMED and record.text.startswith(TRACE_TAG):
        return TRACE
    if record.kind == MALFORMED and record.text.startswith(SUMMARY_PREFIX):
        return SUMMARY
    return None


def _ordered(scans: Sequence[LogScan], slot: str, what: str, requests: int, problems: list[str]) -> list[LogRecord] | None:
    """The slot's records in request order, or None (with a problem) when they cannot be attributed."""
    per_stream = {s.stream: [r for r in s.records if _slot(r) == slot] for s in scans}
    streams = {name: found for name, found in per_stream.items() if found}
    counts = ", ".join(f"{name}: {len(found)}" for name, found in per_stream.items())
    if len(streams) > 1:
        problems.append(
            f"{what} lines were printed on more than one stream ({counts}); "
            "they cannot be attributed to requests by order"
        )
        return None
    records = next(iter(streams.values()), [])
    if len(records) != requests:
        problems.append(
            f"the server's log holds {len(records)} {what} line(s) for {requests} request(s) ({counts}); "
            f"requests are serialized, so each request must print exactly one"
        )
        return None
    return records


def _summaries_before(record: LogRecord, scans: Sequence[LogScan]) -> int:
    scan = next(s for s in scans if s.stream == record.stream)
    return sum(1 for r in scan.records if _slot(r) == SUMMARY and r.offset < record.offset)


def _failure_owner(record: LogRecord, scans: Sequence[LogScan], requests: int) -> int:
    """A failure line belongs to the request whose summary follows it on the same stream."""
    return min(_summaries_before(record, scans), requests - 1)


def _describe(record: LogRecord) -> str:
    if record.kind == FAILURE and record.family == AR_FALLBACK_FAMILY:
        return f"the server decoded a request without speculation ({record.stream}): {record.text}"
    if record.kind == FAILURE:
        return f"speculation or rollback failed on the server ({record.stream}): {record.text}"
    return f"malformed {_slot(record) or 'per-step'} line on {record.stream} ({record.reason}): {record.text}"


def attribute(scans: Sequence[LogScan], requests: int, speculative: bool, traces: bool = True) -> ServerLog:
    """Split a stopped server's records over its ``requests`` requests (sent in this order).

    ``traces``: the build's oracle is its trace (the strict dialect), so every request must print one;
    without it a build that prints none is not faulted for that (another oracle reads its IDs)."""
    problems: list[str] = []
    for scan in scans:
        if scan.dropped:
            problems.append(f"{scan.stream}: {scan.dropped} more trusted line(s) than a run can print were not kept (a flood)")
    banners = sum(1 for s in scans for r in s.records if r.kind == BANNER)
    printed = any(_slot(r) == TRACE for s in scans for r in s.records)
    ordered_traces = _ordered(scans, TRACE, "[ds4-exact-verify-trace]", requests, problems) if traces or printed else None
    summaries: list[LogRecord] | None = []
    if speculative:
        if banners == 0 and not any(_slot(r) == SUMMARY for s in scans for r in s.records):
            problems.append(
                "no speculation summary and no reference-exact banner in the server's log: the server served "
                "without speculation (the draft did not load, or this build does not read the activation variables)"
            )
            summaries = None
        else:
            summaries = _ordered(scans, SUMMARY, "[ds4-spec] gen=... summary", requests, problems)
    else:
        shown = sum(1 for s in scans for r in s.records if _slot(r) == SUMMARY)
        if shown or banners:
            problems.append(
                f"the target-only server printed {shown} speculation summary line(s) and {banners} banner(s): "
                "speculation was active in the arm that must be plain greedy decoding"
            )
    steps, tokens = _per_step_lines(scans, requests, speculative, summaries, problems)
    per_request = _failures_per_request(scans, requests, ordered_traces, summaries)
    out = []
    for k in range(requests):
        trace = ordered_traces[k].trace if ordered_traces is not None else None
        summary = summaries[k].summary if summaries else None
        out.append(RequestLog(
            traces=(trace,) if trace is not None else (),
            banners=banners,
            summaries=(summary,) if summary is not None else (),
            problems=tuple(per_request[k]),
            steps=tuple(step for step, _ in steps[k]),
            tokens=tuple(tokens[k]),
            step_lines=tuple(text for _, text in steps[k]),
        ))
    return ServerLog(tuple(out), banners, tuple(problems))


def _per_step_lines(
    scans: Sequence[LogScan], requests: int, speculative: bool, summaries: list[LogRecord] | None, problems: list[str],
) -> tuple[list[list[tuple[SpecStep, str]]], list[list[TokenLine]]]:
    """Each request's per-step records (with their lines) and per-token lines: a line belongs to the request whose
    summary follows it on its stream; any in the target-only arm or after the last summary is a problem."""
    steps: list[list[tuple[SpecStep, str]]] = [[] for _ in range(requests)]
    tokens: list[list[TokenLine]] = [[] for _ in range(requests)]
    per_step = [r for s in scans for r in s.records if r.kind in (STEP, TOKEN)]
    if per_step and not speculative:
        problems.append(
            f"the target-only server printed {len(per_step)} per-step or per-token speculation line(s) "
            f"(first: {per_step[0].text}): speculation was active in the arm that must be plain greedy decoding"
        )
    elif per_step and summaries:
        stray = []
        for record in per_step:
            index = _summaries_before(record, scans)
            if index >= requests:
                stray.append(record)
            elif record.step is not None:
                steps[index].append((record.step, record.text))
            elif record.token is not None:
                tokens[index].append(record.token)
        if stray:
            problems.append(
                f"{len(stray)} per-step or per-token line(s) follow the last summary on their stream (first: "
                f"{stray[0].text}): they belong to no request"
            )
    return steps, tokens


def _failures_per_request(
    scans: Sequence[LogScan], requests: int, ordered_traces: list[LogRecord] | None, summaries: list[LogRecord] | None,
) -> list[list[str]]:
    """Each request's failure and malformed lines, described."""
    per_request: list[list[str]] = [[] for _ in range(requests)]
    for scan in scans:
        for record in scan.records:
            if record.kind in (FAILURE, MALFORMED):
                owner = _failure_owner(record, scans, requests) if _slot(record) is None else None
                if owner is None:
                    ordered = ordered_traces if _slot(record) == TRACE else summaries
                    owner = ordered.index(record) if ordered and record in ordered else 0
                if requests:
                    per_request[owner].append(_describe(record))
    return per_request
