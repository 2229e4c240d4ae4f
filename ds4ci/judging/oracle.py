"""Where a request's token IDs come from: the parity oracles, strongest first (docs/protocol.md).

One check per oracle reads one request's IDs (or, for text parity, its answer's characters) and the
reasons they cannot be trusted; verdict.py compares them across arms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

from ds4ci.judging import counters as counting
from ds4ci.judging.answer import Answer
from ds4ci.judging.exacttrace import TracedRequest
from ds4ci.judging.protocol import RequestLog, SpecSummary, Trace
from ds4ci.judging.tinywords import ids_from_text

T = TypeVar("T")
# The parity oracles: where the token IDs of both arms are read from, strongest first (docs/protocol.md).
ORACLE_TRACE: Final = "server token trace"  # [ds4-exact-verify-trace] ids=[...] (the strict dialect)
ORACLE_EXACT: Final = "exact-differential trace"  # the tokens records of DFLASH_DS4_EXACT_TRACE_PATH's file
ORACLE_WORDS: Final = "tiny-model words"  # the answer's words, exact for ds4ci's own tiny models
ORACLE_TEXT: Final = "text parity"  # the answers' text, only with [gate] text_parity: not token parity
ORACLES = (ORACLE_TRACE, ORACLE_EXACT, ORACLE_WORDS, ORACLE_TEXT)
TOKEN_ORACLES = (ORACLE_TRACE, ORACLE_EXACT, ORACLE_WORDS)


@dataclass(frozen=True)
class Observed:
    """One request as the gate saw it: which arm, which prompt, which repeat, its log records and its answer."""

    prompt_index: int
    repeat: int
    log: RequestLog
    attributed: bool = True  # False when the server's log could not be split by order (its problems say why)
    answer: Answer | None = None  # None only in unit tests of the log rules: the gate always reads one
    exact: TracedRequest | None = None  # its tokens record in the exact-differential trace, where that is the oracle


@dataclass
class RequestCheck:
    trace: Trace | None = None
    summary: SpecSummary | None = None
    reasons: list[str] = field(default_factory=list)
    ids: tuple[int, ...] | None = None  # the request's token IDs, as the oracle reads them
    counters: counting.Counters | None = None
    # Of ``reasons``, those that say a proof (a rejection) cannot be shown from the evidence, even at its safe
    # bound: they make a cell error, never fail (fail means the answers differ or the evidence contradicts itself).
    unproven: list[str] = field(default_factory=list)


def first_of_exactly_one(items: Sequence[T], what: str, where: str, reasons: list[str]) -> T | None:
    """The first record, with a reason unless there was exactly one (a duplicate is judged too)."""
    if len(items) != 1:
        reasons.append(f"{where}: expected exactly one {what} line, found {len(items)}")
    return items[0] if items else None


def _with_problems(obs: Observed, where: str) -> RequestCheck:
    """A check that starts with the request's log problems and what its answer lacks."""
    result = RequestCheck()
    result.reasons.extend(f"{where}: {p}" for p in obs.log.problems)
    if obs.answer is not None:
        result.reasons.extend(f"{where}: {p}" for p in obs.answer.problems)
    return result


def check_trace(obs: Observed, where: str, reference_exact: int, speculation: int) -> RequestCheck:
    """Clause 2: exactly one trace, n equals the number of IDs, not empty, flags match the arm."""
    if not obs.attributed and not obs.log.traces:  # the server-wide problems say why
        return RequestCheck(reasons=[f"{where}: {p}" for p in obs.log.problems])
    result = _with_problems(obs, where)
    trace = first_of_exactly_one(obs.log.traces, "[ds4-exact-verify-trace]", where, result.reasons)
    if trace is None:
        return result
    result.trace = trace
    result.ids = trace.ids
    tokens = obs.answer.completion_tokens if obs.answer is not None else None
    if tokens is not None and tokens != trace.n:
        result.reasons.append(
            f"{where}: the server's answer says completion_tokens={tokens} but its trace says n={trace.n}: "
            "the server's answer contradicts its own trace"
        )
    if trace.n != len(trace.ids):
        result.reasons.append(f"{where}: trace declares n={trace.n} but lists {len(trace.ids)} IDs")
    if not trace.ids:
        result.reasons.append(f"{where}: trace is empty (no token IDs)")
    if (trace.reference_exact, trace.speculation) != (reference_exact, speculation):
        result.reasons.append(
            f"{where}: trace flags reference_exact={trace.reference_exact} speculation={trace.speculation}, "
            f"expected reference_exact={reference_exact} speculation={speculation} for this arm"
        )
    return result


def check_words(obs: Observed, where: str) -> RequestCheck:
    """The request's IDs read from its answer's words (the tiny models: one word per token)."""
    result = _with_problems(obs, where)
    if obs.answer is None or obs.answer.text is None:
        return result
    ids = ids_from_text(obs.answer.text)
    if ids is None:
        result.reasons.append(
            f"{where}: the answer's text is not tiny-model words (' w<ID>' per token), so its token IDs cannot be "
            f"read: {obs.answer.text[:80]!r}"
        )
        return result
    tokens = obs.answer.completion_tokens
    if tokens is not None and tokens != len(ids):
        result.reasons.append(
            f"{where}: the server's answer says completion_tokens={tokens} but its text spells {len(ids)} token(s)"
        )
    result.ids = tuple(ids)
    return result


def check_exact(obs: Observed, where: str) -> RequestCheck:
    """The request's IDs from its tokens record in the exact-differential trace (the trace's own problems are
    judged per server); the record must say the request ended ok and agree with the answer's count."""
    result = _with_problems(obs, where)
    found = obs.exact
    if found is None:
        return result
    line = f"the exact-differential trace's tokens record of request {found.request} (line {found.line})"
    if not found.ok:
        result.reasons.append(f"{where}: {line} is followed by request_end ok=false: the server says the request failed")
    tokens = obs.answer.completion_tokens if obs.answer is not None else None
    if tokens is not None and tokens != len(found.token_ids):
        result.reasons.append(
            f"{where}: the server's answer says completion_tokens={tokens} but {line} lists {len(found.token_ids)} "
            "token IDs"
        )
    if not found.token_ids:
        result.reasons.append(f"{where}: {line} lists no token IDs")
    result.ids = found.token_ids
    return result


def check_text(obs: Observed, where: str) -> RequestCheck:
    """Text parity: the answer's text stands in for its IDs, as its characters (never called token IDs)."""
    result = _with_problems(obs, where)
    if obs.answer is not None and obs.answer.text is not None:
        result.ids = tuple(ord(c) for c in obs.answer.text)
    return result


def check_ids(obs: Observed, where: str, oracle: str, reference_exact: int, speculation: int) -> RequestCheck:
    """The request's IDs through the build's oracle (ORACLES)."""
    if oracle == ORACLE_WORDS:
        return check_words(obs, where)
    if oracle == ORACLE_TEXT:
        return check_text(obs, where)
    if oracle == ORACLE_EXACT:
        return check_exact(obs, where)
    return check_trace(obs, where, reference_exact, speculation)
