"""The exact-differential trace as a DFLASH-era build writes it (fault ``exact-trace-writer``).

Enabled only when ``DFLASH_DS4_EXACT_TRACE_PATH`` names a file and ``DFLASH_DS4_EXACT_TRACE_Q`` is an
integer 1..4 (otherwise the build prints why and writes nothing). The file is appended to: one
``model_config`` record when the server starts, then per request ``request_start``, one ``step``,
``tokens`` with the generated token IDs and ``request_end``, requests numbered from 0. The
``exact-trace-*`` faults break it the ways ds4ci must refuse.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds4ci.simulator.logs import Log
from ds4ci.simulator.settings import SimSettings

SCHEMA = "lucebox.ds4.exact-diff/v1"
TAG = "[deepseek4-exact-trace]"


class ExactTraceWriter:
    def __init__(self, path: Path, width: int, settings: SimSettings) -> None:
        self._path = path
        self._width = width
        self._s = settings
        self._request = -1
        self._write({"type": "model_config", "n_swa": 128, "compressor_boundaries": [4, 128]})

    @classmethod
    def from_env(cls, environ: Mapping[str, str], settings: SimSettings, log: Log) -> ExactTraceWriter | None:
        path = environ.get("DFLASH_DS4_EXACT_TRACE_PATH", "")
        if not settings.fault("exact-trace-writer") or not path:
            return None
        raw = environ.get("DFLASH_DS4_EXACT_TRACE_Q", "")
        if not raw.isdigit() or not 1 <= int(raw) <= 4:
            log.line(f"{TAG} DFLASH_DS4_EXACT_TRACE_Q must be 1..4")
            return None
        if settings.fault("exact-trace-symlink"):
            Path(path).symlink_to("/etc/hostname")
            return None
        if settings.fault("exact-trace-fifo"):
            os.mkfifo(path)
            return None
        log.line(f"{TAG} enabled path={path} q={int(raw)}")
        return cls(Path(path), int(raw), settings)

    def _write(self, record: dict[str, Any]) -> None:
        with self._path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"schema": SCHEMA, **record}, separators=(",", ":")) + "\n")

    def request(self, prompt_ids: tuple[int, ...], n_gen: int, seed: int, generated: tuple[int, ...]) -> None:
        """One request's records, in the order the build writes them."""
        self._request += 1
        k = self._request
        n = len(prompt_ids)
        self._write({
            "type": "request_start", "request": k, "width": self._width, "restored": False, "cache_position": 0,
            "prompt_tokens": n, "prompt_token_hash": "0" * 16, "prompt_token_ids": list(prompt_ids), "n_gen": n_gen,
            "snap_slot": -1, "snap_pos": -1, "temperature": 0, "top_p": 1, "top_k": 0, "seed": seed,
        })
        self._write({
            "type": "step", "request": k, "position_begin": 0, "position_end": n, "position": n, "width": n,
            "cache_position": n, "logits_present": True, "relations": ["dspark_capture_window"],
        })
        ids = list(generated[:-1] if self._s.fault("exact-trace-ids-off") else generated)
        if not (k == 1 and self._s.fault("exact-trace-no-tokens")):
            self._write({"type": "tokens", "request": k, "token_ids": ids})
        self._write({"type": "request_end", "request": k, "ok": True, "cache_position": n + len(generated)})
