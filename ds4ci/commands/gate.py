"""``ds4ci gate``: config in, gate run, table out, results.json written, exit code back."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds4ci import config, results, table
from ds4ci.errors import NoVerdictError
from ds4ci.gate import run_gate


def run_gate_command(config_file: Path | None, overrides: Mapping[str, Any]) -> int:
    cfg = config.load(config_file, overrides)
    outcome = run_gate(cfg)
    print(table.render(outcome.results))
    if cfg.results_out is not None:
        try:
            results.write_atomic(cfg.results_out, outcome.results)
        except OSError as exc:
            raise NoVerdictError(f"cannot write --results-out {cfg.results_out}: {exc.strerror or exc}") from exc
        print(f"results: {cfg.results_out}")
    return outcome.exit_code
