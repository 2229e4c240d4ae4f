"""What a server's ``lifecycle.json`` says about its process once it stopped, and the times an arm records."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ds4ci.judging import judge
from ds4ci.records import Arm, ServerTiming

if TYPE_CHECKING:  # http.client and psutil are imported when the first server starts
    from ds4ci.gate.server import Server


def now() -> str:
    """UTC to the second: when the run started and finished."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_ms() -> str:
    """UTC to the millisecond: when an arm started and ended (arms side by side overlap within a second)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def timing(arm: Arm, q: int | None, server: Server, t0: float) -> ServerTiming:
    """``results.json`` ``timings.servers``: how long the server took to be ready, and its arm from ``t0``."""
    return {"arm": arm, "q": q, "ready_s": rounded(server.ready_s), "run_s": round(time.monotonic() - t0, 3)}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def process_record(server: Server, stop_timeout_s: float, log_cap_bytes: int) -> dict[str, Any]:
    """Pid, port, readiness, containment, what was swept, how it stopped and whether a log hit its cap."""
    assert server.child is not None  # only for a server whose process started
    return {
        "pid": server.child.pid, "port": server.port, "ready_s": rounded(server.ready_s),
        "containment": server.child.containment, "swept": server.swept,
        "stop": {
            "needed_kill": server.needed_kill, "in_flight": server.in_flight,
            "timeout_s": stop_timeout_s, "exit_code": server.exit_code, "stop_s": rounded(server.stop_s),
        },
        "log_cap_bytes": log_cap_bytes, "scratch": server.scratch(),
        "log_flood": {
            stream: _size(server.log_dir / f"{stream}.log") >= log_cap_bytes for stream in judge.STREAMS
        },
    }
