"""Stderr logging and the exact log-line formats of the real server (design.md section 2).

Every line is written whole and flushed at once under a lock, because the gate cuts the log
file per request by offset: a line still sitting in a buffer when the response goes out would
land in the next request's window.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TextIO


class Log:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()


def _flag(value: bool) -> str:
    return "1" if value else "0"


def trace_line(reference_exact: bool, speculation: bool, n: int, ids: Sequence[object]) -> str:
    joined = " ".join(str(i) for i in ids)
    return (
        f"[ds4-exact-verify-trace] reference_exact={_flag(reference_exact)} "
        f"speculation={_flag(speculation)} n={n} ids=[{joined}]"
    )


def banner_line(q: int) -> str:
    return f"[ds4-spec] reference-exact verifier: sequential target verification, full rollback snapshots, q={q}"


def summary_line(
    *,
    gen: int,
    steps: object,
    matched: object,
    offered: object,
    mean_accept: tuple[int, int],
    q_cap: int,
    full_snap: bool,
    old_format: bool = False,
    extra: str = "",
) -> str:
    counters = "" if old_format else f" matched={matched} offered={offered}"
    line = (
        f"[ds4-spec] gen={gen} steps={steps}{counters} mean_accept={mean_accept[0]}/{mean_accept[1]} "
        f"q_cap={q_cap} full_snap={_flag(full_snap)}"
    )
    return line + (f" {extra}" if extra else "")
