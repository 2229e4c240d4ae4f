"""Reading the server's protocol lines into typed records, and the first-mismatch diff.

The formats are facts of the real server (docs/protocol.md). These line families are trusted:

- the trace ``[ds4-exact-verify-trace] reference_exact=<0|1> speculation=<0|1> n=<N> ids=[...]``;
- the banner ``[ds4-spec] reference-exact verifier: <free text>``;
- the summary ``[ds4-spec] gen=...``, in two dialects. Countered (the upstream gate's contract):
  ``gen steps matched offered q_cap full_snap`` each exactly once as integers, ``mean_accept``
  optional as ``<number>/<number>`` (``1.25/3.00``). Counterless (what every public build prints):
  ``gen steps mean_accept q_cap full_snap`` without matched and offered, plain, with
  ``sampling=<n> sample=<ms> ms/step``, or with ``verify=<mode>``; its counters are derived, never
  guessed (``judging.counters``). Any other ``key=value`` field or trailing text is kept as extra;
- the per-step lines: ``[ds4-spec-token] out= step= slot= token=[ bonus]``, ``[ds4-spec-cmp] step=
  pos= draft=[..] tgt=[..] acc=`` and ``[ds4-spec-t] step= q= acc=`` (``judging.steplines``);
- ``[ds4-agreement] ...`` lines (counted, never judged);
- the failure lines (``[ds4-spec] snapshot restore failed`` ...) and the fall-back to plain decoding
  (``[deepseek4] DSpark spec loaded but this request decodes AR``), each of which fails its request.

Every other line, the other ``[ds4-spec-t]`` timing lines included, is ignored. A line that starts
like a trusted one but does not parse is never skipped: it becomes a *malformed* record that fails.

Logs are read in one streaming pass (``scan_log``): memory stays bounded whatever the log holds,
a line of hundreds of megabytes without a newline included.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ds4ci.judging import confined
from ds4ci.judging.specsteps import SpecStep
from ds4ci.judging.steplines import TokenLine, parse_compare, parse_step_timing, parse_token

TRACE_TAG = "[ds4-exact-verify-trace]"
SPEC_TAG = "[ds4-spec] "
BANNER_PREFIX = "[ds4-spec] reference-exact verifier:"
SUMMARY_PREFIX = "[ds4-spec] gen="
# What follows "[ds4-spec] " on the lines that mean speculation or rollback broke.
FAILURE_MESSAGES = (
    "snapshot failed",
    "snapshot restore failed",
    "replay verify failed",
    "verify failed",
    "drafter forward failed",
    "restore after verify failure failed",
    "no CPU snapshot backend",
    # Newer builds (read in the fork's reference-exact commit 41ee7d0 and later, docs/protocol.md).
    "draft embedding lookup failed",
    "draft projection fallback failed",
    "wide rollback replay failed",
    "verifier returned no bonus logit",
)
# Printed once per process when the drafter is loaded but a request is decoded without speculation.
AR_FALLBACK_PREFIX = "[deepseek4] DSpark spec loaded but this request decodes AR"
TOKEN_TAG = "[ds4-spec-token] "  # noqa: S105 (a line tag, not a secret)
COMPARE_TAG = "[ds4-spec-cmp] "
STEP_TIMING_PREFIX = "[ds4-spec-t] step="
AGREEMENT_TAG = "[ds4-agreement] "
# The real server's refusal of the HIP-only options on any other device (it then exits 2 before listening).
HIP_ONLY_REFUSAL = "[server] --ds4-fused-decode and --ds4-expert-top-k currently require single-device HIP DeepSeek4"
SUMMARY_INTEGERS = ("gen", "steps", "matched", "offered", "q_cap", "full_snap")
COUNTERLESS_INTEGERS = ("gen", "steps", "q_cap", "full_snap")
# The summary variants (``SpecSummary.variant``), as the evidence profile names them.
COUNTERED, PLAIN, SAMPLING, VERIFY_MODE = "countered", "plain", "sampling", "verify-mode"

_TRACE = re.compile(r"reference_exact=(\d+) speculation=(\d+) n=(\d+) ids=\[([^\]]*)\]")
_FIELD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S*)")
_UINT = re.compile(r"[0-9]+")
_RATIO = re.compile(r"[0-9]+(?:\.[0-9]+)?/[0-9]+(?:\.[0-9]+)?")
# The tags by which a DS4 engine (lucebox's dflash_server) shows itself in its log: the protocol's own families and
# the engine's ([deepseek4] ..., [ds4-dspark] ...). A server none of whose arms prints one does not speak it.
DS4_TAGS = (b"[ds4-", b"[ds4]", b"[deepseek4]", b"[deepseek4-")
MAX_IDS_PER_TRACE = 1_000_000
# Longest line kept for parsing; a longer one is kept as a prefix and, if trusted, fails as malformed.
MAX_LINE_BYTES = 8 << 20
_READ_CHUNK = 1 << 20
_SHORT = 160


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
    matched: int | None  # None: a counterless summary (the counters are derived by judging.counters)
    offered: int | None
    mean_accept: str | None
    q_cap: int
    full_snap: int
    extra: tuple[tuple[str, str], ...] = ()  # other key=value fields, in order
    tail: str = ""  # trailing text that is not key=value (e.g. "sample=0.12 ms/step")
    variant: str = COUNTERED  # COUNTERED | PLAIN | SAMPLING | VERIFY_MODE

    def counters(self) -> tuple[int | None, ...]:
        return (self.gen, self.steps, self.matched, self.offered, self.q_cap, self.full_snap, *(
            () if self.matched is not None else (self.mean_accept,)))


TRACE, BANNER, SUMMARY, FAILURE, MALFORMED = "trace", "banner", "summary", "failure", "malformed"
TOKEN, STEP, AGREEMENT = "token", "step", "agreement"
# The evidence profile's line families (``LogRecord.family``), in the order results.json lists them.
TRACE_FAMILY = "trace"
COUNTERED_SUMMARY = "countered-summary"
BANNER_FAMILY = "banner"
TOKEN_FAMILY = "token-trace"  # noqa: S105 (a line family, not a secret)
COMPARE_FAMILY = "compare"
STEP_TIMING_FAMILY = "step-timing"
AGREEMENT_FAMILY = "agreement"
AR_FALLBACK_FAMILY = "ar-fallback"
FAILURE_FAMILY = "failure"
LINE_FAMILIES = (
    TRACE_FAMILY, COUNTERED_SUMMARY, BANNER_FAMILY, f"summary-{PLAIN}", f"summary-{SAMPLING}",
    f"summary-{VERIFY_MODE}", TOKEN_FAMILY, COMPARE_FAMILY, STEP_TIMING_FAMILY, AGREEMENT_FAMILY,
    AR_FALLBACK_FAMILY, FAILURE_FAMILY,
)


@dataclass(frozen=True)
class LogRecord:
    """One trusted line of one log stream, where it stood, and what it said."""

    kind: str  # TRACE | BANNER | SUMMARY | FAILURE | MALFORMED | TOKEN | STEP | AGREEMENT
    stream: str  # the stream's name, e.g. "stderr"
    offset: int  # byte offset of the line's start in that stream
    text: str  # the line, shortened for messages
    trace: Trace | None = None
    summary: SpecSummary | None = None
    reason: str = ""  # why a MALFORMED line did not parse
    token: TokenLine | None = None  # a TOKEN line
    step: SpecStep | None = None  # a STEP line ([ds4-spec-cmp] or [ds4-spec-t] step=)
    family: str = ""  # the evidence-profile family (judging.profile), "" for a MALFORMED line


@dataclass(frozen=True)
class LogScan:
    stream: str
    size: int  # bytes read
    records: tuple[LogRecord, ...]
    dropped: int  # trusted records beyond max_records (not kept; a flood)


@dataclass(frozen=True)
class RequestLog:
    """Everything trusted that belongs to one request (attributed by order, see ``attribute``)."""

    traces: tuple[Trace, ...]
    banners: int
    summaries: tuple[SpecSummary, ...]
    problems: tuple[str, ...]
    steps: tuple[SpecStep, ...] = ()  # the request's per-step records, in log order (all sources)
    tokens: tuple[TokenLine, ...] = ()  # its per-token trace lines, in log order
    step_lines: tuple[str, ...] = ()  # the per-step lines' text, parallel to ``steps`` (for reasons)


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


def shorten(line: str) -> str:
    return line if len(line) <= _SHORT else line[: _SHORT - 3] + "..."


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
    bad = next((p for p in parts if not _UINT.fullmatch(p)), None)
    if bad is not None:
        raise ValueError(f"token IDs must be non-negative integers, found {bad[:40]!r}")
    if raw_ids.strip() and " ".join(parts) != raw_ids.strip():
        raise ValueError("token IDs must be separated by single spaces")
    return Trace(int(ref), int(spec), int(n), tuple(int(p) for p in parts))


def parse_summary(body: str) -> SpecSummary:
    """Parse the text after ``[ds4-spec] `` of a ``gen=...`` line. Raises ValueError with the reason.

    A line with neither matched nor offered is the counterless dialect: it must then carry
    ``mean_accept``, from which (with the fixed width) the counters may be derived.
    """
    fields: dict[str, list[str]] = {}
    extra: list[tuple[str, str]] = []
    tail: list[str] = []
    for token in body.split():
        match = _FIELD.fullmatch(token)
        if match is None or tail:  # once plain text starts, everything after it is tail text
            tail.append(token)
            continue
        key, value = match.groups()
        if key in SUMMARY_INTEGERS or key == "mean_accept":
            fields.setdefault(key, []).append(value)
        else:
            extra.append((key, value))
    twice = [k for k, values in fields.items() if len(values) > 1]
    if twice:
        raise ValueError(f"field(s) {', '.join(twice)} appear more than once")
    counterless = "matched" not in fields and "offered" not in fields
    required = (*COUNTERLESS_INTEGERS, "mean_accept") if counterless else SUMMARY_INTEGERS
    missing = [k for k in required if k not in fields]
    if missing:
        what = " (a summary without matched/offered counters must print mean_accept)" if counterless else ""
        raise ValueError(f"required field(s) missing: {', '.join(missing)}{what}")
    value = {k: fields[k][0] for k in fields}
    for key in COUNTERLESS_INTEGERS if counterless else SUMMARY_INTEGERS:
        if not _UINT.fullmatch(value[key]):
            raise ValueError(f"{key} must be a non-negative integer, found {value[key][:40]!r}")
    if value["full_snap"] not in ("0", "1"):
        raise ValueError(f"full_snap must be 0 or 1, found {value['full_snap'][:40]}")
    mean = value.get("mean_accept")
    if mean is not None and not _RATIO.fullmatch(mean):
        raise ValueError(f"mean_accept must be <number>/<number> like 1.25/3.00, found {mean[:40]!r}")
    keys = {k for k, _ in extra}
    variant = COUNTERED if not counterless else VERIFY_MODE if "verify" in keys else SAMPLING if "sampling" in keys else PLAIN
    return SpecSummary(
        gen=int(value["gen"]),
        steps=int(value["steps"]),
        matched=None if counterless else int(value["matched"]),
        offered=None if counterless else int(value["offered"]),
        mean_accept=mean,
        q_cap=int(value["q_cap"]),
        full_snap=int(value["full_snap"]),
        extra=tuple(extra),
        tail=" ".join(tail),
        variant=variant,
    )


def _family(summary: SpecSummary) -> str:
    return COUNTERED_SUMMARY if summary.variant == COUNTERED else f"summary-{summary.variant}"


def classify(line: str, stream: str = "stderr", offset: int = 0, truncated: bool = False) -> LogRecord | None:
    """The record a line stands for, or None for a line the gate does not trust (ignored)."""
    line = line.rstrip("\r\n")
    kind: str | None = None
    if line.startswith(TRACE_TAG):
        kind = TRACE
    elif line.startswith(BANNER_PREFIX):
        return LogRecord(BANNER, stream, offset, shorten(line), family=BANNER_FAMILY)
    elif line.startswith(SUMMARY_PREFIX):
        kind = SUMMARY
    elif line.startswith(SPEC_TAG) and line[len(SPEC_TAG):].startswith(FAILURE_MESSAGES):
        return LogRecord(FAILURE, stream, offset, shorten(line), family=FAILURE_FAMILY)
    elif line.startswith(AR_FALLBACK_PREFIX):
        return LogRecord(FAILURE, stream, offset, shorten(line), family=AR_FALLBACK_FAMILY)
    elif line.startswith(AGREEMENT_TAG):
        return LogRecord(AGREEMENT, stream, offset, shorten(line), family=AGREEMENT_FAMILY)
    elif line.startswith((TOKEN_TAG, COMPARE_TAG, STEP_TIMING_PREFIX)):
        kind = TOKEN if line.startswith(TOKEN_TAG) else STEP
    if kind is None:
        return None
    if truncated:
        return LogRecord(MALFORMED, stream, offset, shorten(line), reason=f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        if kind == TRACE:
            return LogRecord(TRACE, stream, offset, shorten(line), trace=parse_trace(line[len(TRACE_TAG):]),
                             family=TRACE_FAMILY)
        if kind == TOKEN:
            return LogRecord(TOKEN, stream, offset, shorten(line), token=parse_token(line[len(TOKEN_TAG):]),
                             family=TOKEN_FAMILY)
        if kind == STEP and line.startswith(COMPARE_TAG):
            return LogRecord(STEP, stream, offset, shorten(line), step=parse_compare(line[len(COMPARE_TAG):]),
                             family=COMPARE_FAMILY)
        if kind == STEP:
            step = parse_step_timing(line[len(STEP_TIMING_PREFIX) - len("step="):])
            return LogRecord(STEP, stream, offset, shorten(line), step=step, family=STEP_TIMING_FAMILY)
        summary = parse_summary(line[len(SPEC_TAG):])
        return LogRecord(SUMMARY, stream, offset, shorten(line), summary=summary, family=_family(summary))
    except ValueError as exc:
        return LogRecord(MALFORMED, stream, offset, shorten(line), reason=str(exc))


def _lines(fh: BinaryIO) -> Iterator[tuple[int, bytes, bool]]:
    """(offset, line without newline, truncated) for every line; linear time, bounded memory.

    A line longer than MAX_LINE_BYTES yields its first MAX_LINE_BYTES bytes with truncated=True;
    the rest of it is skipped without being kept. A last line without a newline is yielded too.
    """
    offset = 0  # of the line being assembled
    pending = bytearray()
    overflow = False
    position = 0
    while chunk := fh.read(_READ_CHUNK):
        start = 0
        while True:
            cut = chunk.find(b"\n", start)
            piece = chunk[start:] if cut < 0 else chunk[start:cut]
            room = MAX_LINE_BYTES - len(pending)
            if len(piece) > room:
                overflow = True
                piece = piece[:max(room, 0)]
            pending += piece
            if cut < 0:
                break
            yield offset, bytes(pending), overflow
            offset = position + cut + 1
            pending.clear()
            overflow = False
            start = cut + 1
        position += len(chunk)
    if pending or overflow:
        yield offset, bytes(pending), overflow


def scan_log(path: Path, stream: str, max_records: int, root: Path | None = None) -> LogScan:
    """Every trusted record of one log stream, in order (at most max_records kept).

    The log is opened through ``confined`` (a regular file, never through a link; below ``root``
    when given, the bundle it belongs to); ConfinedError says why it could not be.
    """
    base = root if root is not None else path.parent
    with confined.open_regular(base, confined.relative(base, path)) as fh:
        size = os.fstat(fh.fileno()).st_size
        return _scan(fh, stream, max_records, size)


def prints_ds4_line(path: Path, root: Path) -> bool:
    """Whether one log stream holds a line tagged ``[ds4...`` or ``[deepseek4...`` (``DS4_TAGS``), read as
    ``scan_log`` reads it (confined below ``root``; ConfinedError when it cannot be)."""
    with confined.open_regular(root, confined.relative(root, path)) as fh:
        return any(raw.startswith(DS4_TAGS) for _, raw, _ in _lines(fh))


def _scan(fh: BinaryIO, stream: str, max_records: int, size: int) -> LogScan:
    records: list[LogRecord] = []
    dropped = 0
    for offset, raw, truncated in _lines(fh):
        if not raw.startswith(b"["):  # cheap filter: every trusted line starts with a tag
            continue
        record = classify(raw.decode("utf-8", errors="replace"), stream, offset, truncated)
        if record is None:
            continue
        if len(records) >= max_records:
            dropped += 1
            continue
        records.append(record)
    return LogScan(stream, size, tuple(records), dropped)


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
