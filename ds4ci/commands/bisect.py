"""``ds4ci bisect``: the search, then its text (stdout, or stderr with --json), its JSON and the job summary."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ds4ci.commands.gate_outputs import STEP_SUMMARY
from ds4ci.log import Logger
from ds4ci.options import configpath
from ds4ci.records import BisectResult
from ds4ci.textsafe import json_text, neutralise


def run_bisect(repo_dir: Path, config: Path | None, *, good: str | None, bad: str | None, base_ref: str | None,
               runner: str | None, widths: str | None, evidence_dir: Path | None, as_json: bool,
               config_base: Path | None = None) -> int:
    from ds4ci.bisect.outcome import text
    from ds4ci.bisect.run import Request, run
    from ds4ci.commands.gate import refuse_credentials

    log = Logger.from_env()
    refuse_credentials(os.environ, log)  # each step's gate would refuse them: refused once, before any work
    config_file = configpath.required(configpath.resolve(config, "bisect"))
    doc = run(Request(repo_dir, config_file, good, bad, base_ref, runner, widths, evidence_dir, config_base), log)
    human = sys.stderr if as_json else sys.stdout
    print(neutralise(text(doc)), file=human, flush=True)
    _job_summary(doc, log)
    if as_json:
        sys.stdout.write(json_text(json.dumps(doc, indent=2, sort_keys=True)) + "\n")
    return doc["exit_code"]


def _job_summary(doc: BisectResult, log: Logger) -> None:
    """Under Actions, the result with every step in ``$GITHUB_STEP_SUMMARY``; a failure is a warning."""
    target = os.environ.get(STEP_SUMMARY)
    if not target:
        return
    from ds4ci.report import bisect, render

    try:
        body = bisect.section(render.environment(), doc, kind="summary").body
        with Path(target).open("a", encoding="utf-8") as fh:
            fh.write(neutralise(body + "\n"))  # commit subjects and reasons are the pull request's
    except Exception as exc:  # the summary is a convenience: it must not change the result
        log.warning(f"could not write the job summary to ${STEP_SUMMARY} ({target}): {type(exc).__name__}: {exc}")
