"""The ``gate`` command's Typer wiring (every flag comes from the options table), and ``bisect``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

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


def bisect(
    good: Annotated[str | None, typer.Option(metavar="REV", help="A commit that passes the gate (default: the merge "
                                             "base of --bad with --base-ref, else with the config's gate.base_ref).")] = None,
    bad: Annotated[str | None, typer.Option(metavar="REV", help="A commit that fails the gate (default: HEAD, the "
                                            "pull request's head on its checkout).")] = None,
    config: Annotated[Path | None, typer.Option(metavar="PATH", help="The gate's config (default ./ds4ci.toml), read "
                                                "once before the first step; its relative paths are read in each "
                                                "step's checkout, from its own folder in the repository or from "
                                                "--config-base. Under GitHub Actions it must lie outside the "
                                                "checkout (the trusted copy the gate ran with).")] = None,
    config_base: Annotated[Path | None, typer.Option(metavar="DIR", help="The folder of the repository the config's "
                                                     "relative paths start from, when the config lies outside it "
                                                     "(gate.yml: the trusted copy in $RUNNER_TEMP).")] = None,
    repo_dir: Annotated[Path, typer.Option(metavar="PATH", help="The git repository to search.")] = Path(),
    base_ref: Annotated[str | None, typer.Option(metavar="REF", help="The pull request's base branch, e.g. "
                                                 "origin/main, for the default --good.")] = None,
    runner: Annotated[str | None, typer.Option(metavar="NAME", help="The runner table of the config to use.")] = None,
    widths: Annotated[str | None, typer.Option(metavar="Q,Q", help="A focused run: only these draft widths (among "
                                               "the configured ones), e.g. 3.")] = None,
    evidence_dir: Annotated[Path | None, typer.Option(metavar="PATH", help="Where every step's evidence bundle is "
                                                      "kept (default: the config's gate.evidence_dir).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object on stdout (the text "
                                           "goes to stderr).")] = False,
) -> None:
    """Find the first commit between --good and --bad that fails the gate: a binary search over the first-parent
    commits, each step a whole `ds4ci gate` run on that commit, checked out in one scratch worktree (never yours)
    and built with the config's [build] in the sandbox.

    A commit that does not build, or whose gate reaches no verdict, is skipped (as `git bisect skip` does) and
    said so. Each step's evidence bundle is kept in the config's evidence folder (`ds4ci verify` re-derives it);
    the result names the first failing commit, the last passing one, which widths and prompts differ and where,
    and the skipped commits. Under GitHub Actions the result and every step go to the job summary. A bisect sets
    no status.

    Exit codes: 0 found (the first failing commit is named); 1 not found (the bad end passes, or the good end
    fails already: no culprit in the range); 2 usage (a bad flag, config or ref; nothing ran); 3 no verdict
    (only skipped commits left where the culprit is, an end that cannot be judged, a step the gate refused, an
    interrupt).
    """
    from ds4ci.commands.bisect import run_bisect

    exit_with(lambda: run_bisect(repo_dir, config, good=good, bad=bad, base_ref=base_ref, runner=runner,
                                 widths=widths, evidence_dir=evidence_dir, as_json=json_out, config_base=config_base))
