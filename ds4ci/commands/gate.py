"""``ds4ci gate``: config in, gate run, table out, results.json written, exit code back."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.evidence import results, store
from ds4ci.gate.run import run_gate
from ds4ci.options import config

# Write credentials a GitHub job may carry. The gate runs the pull request's code (the server it
# builds) as the same user, which can read ds4ci's environment through /proc/<pid>/environ.
WRITE_CREDENTIALS = ("GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")


def refuse_credentials(environ: Mapping[str, str]) -> None:
    """Under Actions a credential in ds4ci's own environment is refused; elsewhere it is a warning."""
    present = [name for name in WRITE_CREDENTIALS if environ.get(name)]
    if not present:
        return
    message = (
        f"{', '.join(present)} is set in the gate's environment, where the server under test (code from the "
        "pull request) could read it from /proc/<pid>/environ; remove it from this job's env (the gate job "
        "needs no token: publish from a separate job with `ds4ci verify` + `ds4ci publish`)"
    )
    if environ.get("GITHUB_ACTIONS") == "true":
        raise UsageError(message)
    print(f"ds4ci: warning: {message}", file=sys.stderr)


def prepare_quick_exit() -> None:
    """Let the interpreter exit in milliseconds instead of ~0.2 s, losing nothing.

    At shutdown CPython runs full collections over every object of every module (typer, pydantic,
    requests, jsonschema: hundreds of thousands). Frozen objects are never traversed. Output is
    flushed here and again by the interpreter, atexit handlers still run, and every evidence file
    is closed (results.json fsynced) before this is called; recent cyclic garbage is collected
    first, so a file dropped in a cycle is still finalized (flushed) like before.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    gc.collect(1)
    gc.freeze()


def run_gate_command(config_file: Path | None, overrides: Mapping[str, Any]) -> int:
    try:
        return _run_gate_command(config_file, overrides)
    finally:
        prepare_quick_exit()


def _run_gate_command(config_file: Path | None, overrides: Mapping[str, Any]) -> int:
    refuse_credentials(os.environ)
    cfg = config.load(config_file, overrides)
    outcome = run_gate(cfg)
    from ds4ci.report import table  # imported once the run is over: the first progress line comes sooner

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
        from ds4ci.evidence import bundle  # tarfile and gzip, only for --bundle-out

        try:
            bundle.write_archive(final, cfg.bundle_out, store.sealed_files(final))
        except OSError as exc:
            raise NoVerdictError(f"cannot write --bundle-out {cfg.bundle_out}: {exc.strerror or exc}") from exc
        print(f"bundle: {cfg.bundle_out}")
    return outcome.exit_code
