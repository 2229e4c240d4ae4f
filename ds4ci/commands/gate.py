"""``ds4ci gate``: config in, gate run, table out, results.json written, exit code back."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds4ci import bundle, config, evidence, results, table
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
    if cfg.bundle_out is not None:
        final = Path(outcome.results["evidence"]["dir"])
        if outcome.results["evidence"]["manifest_sha256"] is None:
            raise NoVerdictError(f"no sealed evidence to archive as --bundle-out {cfg.bundle_out}; see {final}")
        try:
            bundle.write_archive(final, cfg.bundle_out, evidence.sealed_files(final))
        except OSError as exc:
            raise NoVerdictError(f"cannot write --bundle-out {cfg.bundle_out}: {exc.strerror or exc}") from exc
        print(f"bundle: {cfg.bundle_out}")
    return outcome.exit_code
