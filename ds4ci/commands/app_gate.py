"""The ``gate`` command's Typer wiring: every flag comes from the options table."""

from __future__ import annotations

from typing import Any

from ds4ci.commands.finish import exit_with
from ds4ci.commands.flags import table_flags


@table_flags("gate")
def gate(**settings: Any) -> None:
    """Run the parity gate: 1 target-only server + 1 reference-exact server per width.

    Settings come from --config, else ./ds4ci.toml when it exists; flags override them.
    Every pinned SHA-256 is verified before any server starts. Evidence of the attempt is kept
    under --evidence-dir whatever the outcome. With --json, stdout carries one JSON object
    (verdict, exit_code, runner, scope, evidence, results_out, bundle_out, widths: verdict per
    width) and the human table goes to stderr. Exit codes: 0 pass, 1 fail, 2 usage, 3 no verdict.
    """
    from ds4ci.commands.gate import run_from_flags

    exit_with(lambda: run_from_flags(settings))
