"""Log writing and the exact log-line formats of the real server.

Every line is written whole and flushed at once under a lock (the real server writes its stderr
unbuffered), so a line is in the file before the HTTP response that follows it is sent.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

BANNER = "[ds4-spec] reference-exact verifier: sequential target replay with full rollback snapshots"


class Log:
    """Writes lines to stderr (the protocol stream) or stdout (some diagnostics)."""

    def __init__(self, stderr: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self._stderr = stderr if stderr is not None else sys.stderr
        self._stdout = stdout if stdout is not None else sys.stdout
        self._lock = threading.Lock()

    def line(self, text: str, *, stdout: bool = False) -> None:
        stream = self._stdout if stdout else self._stderr
        with self._lock:
            stream.write(text + "\n")
            stream.flush()


@dataclass(frozen=True)
class Pending:
    """A log line decided now and written later (before or after the response)."""

    text: str
    stdout: bool = False
    protocol: bool = True  # banner, summary, trace, failure line: what a build may write late


def _flag(value: bool) -> str:
    return "1" if value else "0"


def trace_line(reference_exact: bool, speculation: bool, n: int, ids: Sequence[object]) -> str:
    joined = " ".join(str(i) for i in ids)
    return (
        f"[ds4-exact-verify-trace] reference_exact={_flag(reference_exact)} "
        f"speculation={_flag(speculation)} n={n} ids=[{joined}]"
    )


@dataclass(frozen=True)
class SummaryStyle:
    """How this build prints its summary; the default is the reference-exact build's format."""

    counters: bool = True  # matched= and offered= present
    old_mean: bool = False  # mean_accept as %.2f/%d instead of %.2f/%.2f
    float_counters: bool = False
    verify_mode: str | None = None  # an extra verify=<mode> before full_snap
    tail: str = ""  # anything appended after full_snap


def mean_accept(matched: int, offered: int, steps: int, old: bool = False) -> str:
    """accept_sum/steps and offered_sum/steps, as the real printf formats them."""
    if steps <= 0:
        return "0.00/0" if old else "0.00/0.00"
    if old:
        return f"{matched / steps:.2f}/{offered // steps}"
    return f"{matched / steps:.2f}/{offered / steps:.2f}"


def summary_line(
    *, gen: int, steps: int, matched: int, offered: int, mean_steps: int, q_cap: int, full_snap: bool,
    style: SummaryStyle = SummaryStyle(),
) -> str:
    """``mean_steps`` is the real step count the means divide by (``steps`` may be falsified)."""
    point = ".0" if style.float_counters else ""
    counters = f" matched={matched}{point} offered={offered}{point}"
    verify = f" verify={style.verify_mode}" if style.verify_mode else ""
    return (
        f"[ds4-spec] gen={gen} steps={steps}{counters if style.counters else ''} "
        f"mean_accept={mean_accept(matched, offered, mean_steps, style.old_mean)} "
        f"q_cap={q_cap}{verify} full_snap={_flag(full_snap)}{style.tail}"
    )


# The per-step and per-token lines of the real spec loop (docs/protocol.md): the compare line for
# the first 8 steps and the timing line for steps 1..4 and every 32nd under DS4_TIMING, the
# per-token line under DS4_TOKEN_TRACE. ``acc`` counts the seed plus the accepted candidates.
COMPARE_STEPS = 8
AR_FALLBACK = (
    "[deepseek4] DSpark spec loaded but this request decodes AR: force_ar=0 stop_tokens=0 sampling=1 "
    "(temp=0.70 rep_pen=1.00 freq_pen=0.00 pres_pen=0.00; greedy needs temperature 0)"
)


def _slots(values: Sequence[int], count: int) -> str:
    return " ".join(str(v) for v in [*values[:count], *[-1] * max(count - len(values), 0)])


def compare_line(step: int, position: int, drafts: Sequence[int], targets: Sequence[int], accepted: int) -> str:
    return (
        f"[ds4-spec-cmp] step={step} pos={position} draft=[{_slots(drafts, 3)}] tgt=[{_slots(targets, 4)}] "
        f"acc={accepted + 1}"
    )


def timing_step_line(step_after: int, width: int, accepted: int, verify_ms: float) -> str:
    return (
        f"[ds4-spec-t] step={step_after} q={width} acc={accepted + 1} | draft=0.1 head=0.0 save=0.1 "
        f"verify={verify_ms:.1f} probe(submit/wait)=0.0/0.0 apply=0.0 feat=0.0 ms (cum means)"
    )


def token_line(out: int, step: int, slot: int, token: int, bonus: bool) -> str:
    return f"[ds4-spec-token] out={out} step={step} slot={slot} token={token}{' bonus' if bonus else ''}"
