"""``ds4ci preflight``: runner health and fingerprint; exit 0 ready, 3 not ready."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ds4ci.errors import EXIT_ERROR, EXIT_PASS, UsageError
from ds4ci.options import config as config_mod
from ds4ci.options import configpath
from ds4ci.runner import busy
from ds4ci.runner.preflight import preflight, render_table
from ds4ci.textsafe import json_text, neutralise


def _progress(message: str) -> None:
    print(f"ds4ci preflight: {message}", file=sys.stderr, flush=True)


def run_preflight(
    config: Path | None, runner: str | None, as_json: bool, deadline_s: float, busy_wait_s: float | None = None,
    config_base: Path | None = None,
) -> int:
    if not math.isfinite(deadline_s) or deadline_s <= 0:
        raise UsageError(f"--deadline: expected a positive number of seconds, found {deadline_s}")
    config = configpath.resolve(config, "preflight", quiet=as_json)
    if busy_wait_s is not None:
        busy_wait_s = busy.parse_busy_wait(busy_wait_s, "--busy-wait")
    elif config is not None:
        busy_wait_s = busy.load_busy_wait(config)
    # The files are checked by preflight itself (a problem each: not ready, exit 3), not by the loader.
    gate_config = config_mod.load(config, {"runner": runner, "config_base": config_base},
                                  check_files=False) if config is not None else None
    report = preflight(gate_config, runner, deadline_s, _progress, busy_wait_s or 0.0)
    if as_json:
        sys.stdout.write(json_text(json.dumps(report.to_json(), indent=2, sort_keys=True, allow_nan=False)) + "\n")
    else:
        sys.stdout.write(neutralise(render_table(report)))  # a PR-built binary's probes are quoted
    sys.stdout.flush()
    for problem in report.problems:
        _progress(f"not ready: {problem}")
    if config is not None and not config_mod.under_actions():  # under Actions the workflow has resolved its pin
        from ds4ci.commands import workflowpin

        for warning in workflowpin.warnings(config):
            _progress(f"warning: {warning}")
    return EXIT_PASS if report.ready else EXIT_ERROR
