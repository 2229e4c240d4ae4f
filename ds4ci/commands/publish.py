"""`ds4ci publish`: sticky PR comment + one commit status per runner.

Exit codes: 0 everything was posted (a *failing* gate published correctly is still 0: the
gate's own exit code gates the job); 2 bad input or refused (malformed, stale or ambiguous
results, bad flags, no token); 3 GitHub failed or refused (read-only token, outage).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ds4ci.commands import commentmode
from ds4ci.errors import PublishError, UsageError
from ds4ci.github import publish
from ds4ci.options import table as options
from ds4ci.textsafe import neutralise

if TYPE_CHECKING:
    from ds4ci.github.client import Client
    from ds4ci.github.plan import PublishPlan
    from ds4ci.github.verified import Published
    from ds4ci.records import Results


def _write_summary(body: str, summary_file: Path | None) -> None:
    env_file = os.environ.get("GITHUB_STEP_SUMMARY")
    target = summary_file or (Path(env_file) if env_file else None)
    if target is None:
        return
    try:
        # $GITHUB_STEP_SUMMARY is shared by the job's steps: append, never replace.
        with target.open("a", encoding="utf-8") as fh:
            fh.write(neutralise(body))  # it quotes server and pull-request text
    except OSError as exc:
        raise UsageError(f"cannot write the job summary to {target}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class PublishRequest:
    """Where and how to publish: one record from the CLI, read by every step below."""

    repo: str | None = None
    pr: int | None = None
    sha: str | None = None
    api_url: str | None = None
    target_url: str | None = None
    token_env: str = "GITHUB_TOKEN"  # noqa: S105 - the name of the variable, not a token
    dry_run: bool = False
    no_comment: bool = False
    no_status: bool = False
    template_dir: Path | None = None
    summary_file: Path | None = None
    comment_author: str | None = None
    allow_focused: bool = False
    merge_config: Path | None = None
    expect_runners: tuple[str, ...] = ()
    expect_config: Path | None = None  # the trusted ds4ci.toml every bundle's settings must match
    check_runs: bool | None = None  # None: [publish] check_runs of the trusted config (default true)
    verdicts_out: Path | None = None  # where each runner's decided state goes, as JSON (gate.yml's verdict jobs)
    comment_mode: str | None = None  # None: [publish] comment_mode of the trusted config (default always)
    dry_run_dir: Path | None = None  # with dry_run: where the Markdown files go (default ./ds4ci-dry-run)
    calibrations: Path | None = None  # where the runners' calibration records are (the report cites them)
    bisects: tuple[Path, ...] = ()  # runners' `ds4ci bisect --json` results, a comment section each
    comment_record: Path | None = None  # where the written comment's id goes (gate.yml uploads the record)
    calibration_record: Path | None = None  # where the cited calibrations' days go (gate.yml uploads the record)

    def cited(self, docs: list[Results], verified: Collection[str] = ()) -> dict[str, str]:
        """Each gate runner's calibration line (``ds4ci.calibrate.latest``): the one sealed in its bundle where the
        bundle verified (runner names in ``verified``), else from --calibrations ({} without)."""
        from ds4ci.calibrate.latest import cite_all

        return cite_all(self.calibrations, [d if d["runner"]["name"] in verified else
                                            {k: v for k, v in d.items() if k != "calibration"} for d in docs])


def run_publish(
    results: list[Path], request: PublishRequest, *, pending: bool = False, runner: str | None = None,
    unverified: bool = False,
) -> int:
    """The CLI's publish: every input is verified first (``verified``), then published."""
    from ds4ci.github import verified

    publish.validate_target(request.repo, request.pr, request.sha, request.dry_run)
    if request.dry_run_dir is not None and not request.dry_run:
        raise UsageError("--dry-run-dir names where --dry-run writes its files; pass --dry-run too, or leave it out")
    if request.verdicts_out is not None:  # ds4ci's own output: never inside a checkout, never through a link
        from ds4ci.fileio import refuse_inside_checkout

        refuse_inside_checkout(request.verdicts_out, "--verdicts-out")
    if request.calibration_record is not None:
        from ds4ci.fileio import refuse_inside_checkout

        refuse_inside_checkout(request.calibration_record, "--calibration-record")
    if pending:
        return _run_pending(results, request, runner)
    if runner is not None:
        raise UsageError("--runner is only used with --pending (results name their runner)")
    from ds4ci.report.docview.load import check_inputs

    check_inputs(results)
    expected, keys = None, {}
    if request.expect_config is not None:
        from ds4ci.evidence.verify import expectations

        expected = expectations(request.expect_config)
    for config in (request.expect_config, request.merge_config):  # runner keys named by a trusted config
        if config is not None:
            keys.update(_trusted_keys(config))
    return publish_documents(verified.load(results, verified.Trust(expected, unverified, keys)), request)


def own_run(target_url: str | None, repo: str | None) -> int | None:
    """The workflow run this publish runs in: ``GITHUB_RUN_ID`` under Actions (report.yml's --target-url names
    the gate's run, not its own), else the run ``--target-url`` names."""
    from ds4ci.github.provenance import run_id

    raw = os.environ.get("GITHUB_RUN_ID", "") if os.environ.get("GITHUB_ACTIONS") == "true" else ""
    return int(raw) if re.fullmatch(r"[1-9][0-9]{0,17}", raw) else run_id(target_url, repo or "")


def _trusted_keys(config_file: Path) -> dict[str, tuple[str, ...]]:
    from ds4ci.evidence import attestation

    return attestation.trusted_keys(config_file)


def publish_documents(published: list[Published], request: PublishRequest) -> int:
    """Comment and statuses for documents the trust step (``verified.load``) has already judged: read the facts,
    make the plan (``ds4ci.github.plan``), then apply it, or with --dry-run print it."""
    from ds4ci.github import apply, facts, plan, runnerview
    from ds4ci.report import bisect
    from ds4ci.report.docview.load import unique_runners

    r = request
    mode = commentmode.resolve(r.comment_mode, r.no_comment, r.expect_config)
    publish.validate_target(r.repo, r.pr, r.sha, r.dry_run)
    publish.validate_runners(r.expect_runners)
    unique_runners([p.doc for p in published])
    seen = runnerview.viewed(published)  # each document enters here, once: every form reads its view
    docs = [view for _, view in seen]
    trusted = [p.doc["runner"]["name"] for p in published if p.may_set_status]
    found, client = facts.Facts(), None
    settings = facts.Settings(repo=r.repo, pr=r.pr, target_url=r.target_url, template_dir=r.template_dir,
                              comment_mode=mode, status=not r.no_status, expect_runners=r.expect_runners,
                              comment_author=r.comment_author, merge_config=r.merge_config,
                              expect_config=r.expect_config,
                              calibrations=r.cited([p.doc for p, _ in seen], trusted),
                              verdicts_out=r.verdicts_out, api_url=r.api_url, token_env=r.token_env,
                              comment_record=r.comment_record, own_run=own_run(r.target_url, r.repo))
    try:
        head = publish.results_head(docs, r.sha)
        settings = dataclasses.replace(settings, check_runs=_wants_check_runs(r), bisects=bisect.for_publish(
            r.bisects, {d.name for d in docs}, head))
        if not r.dry_run:
            client = _client(r.repo, r.api_url, r.token_env)
            found = facts.gather(client, settings, docs, head, trusted)
    except (UsageError, PublishError):  # the job summary still shows the results, as GitHub was not told
        _write_summary(plan.job_summary(docs, settings), r.summary_file)
        raise
    views = runnerview.views_of(seen, head, found.full_passes, r.allow_focused)
    made = plan.make(views, settings, found)
    _write_summary(made.summary, r.summary_file)
    if client is None:
        return _dry_run(made, r)
    apply.apply(made, client)
    if r.calibration_record is not None:  # last, like the verdicts: only once everything was posted
        from ds4ci.github import calrecord
        from ds4ci.github.publish import RUNNER_RE

        calrecord.write(r.calibration_record, calrecord.cited_days(
            (p.doc["runner"]["name"], p.doc["runner"].get("role", "gate"), p.doc.get("calibration"))
            for p in published if p.may_set_status and RUNNER_RE.match(p.doc["runner"]["name"])))
    return 0


DRY_RUN_DIR = Path("ds4ci-dry-run")


def _dry_run(made: PublishPlan, r: PublishRequest) -> int:
    """The plan as files (plan.json, the comment, the job summary, each check run) and a listing on stdout."""
    from ds4ci.fileio import write_text_atomic
    from ds4ci.github import plan

    folder = r.dry_run_dir or DRY_RUN_DIR
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--dry-run-dir {folder}: expected a folder, found a file")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in plan.files(made):
        write_text_atomic(folder / name, text)
    for note in made.notes:
        print(f"ds4ci: {note}", file=sys.stderr)
    sys.stdout.write(plan.listing(made, folder))
    return 0


def _wants_check_runs(r: PublishRequest) -> bool:
    """--check-runs / --no-check-runs, else ``[publish] check_runs`` of the trusted config, else true."""
    if r.check_runs is not None:
        return r.check_runs
    if r.expect_config is None:
        return bool(options.get("publish", "check_runs").default)
    from ds4ci.options.sections import read_section

    return bool(read_section(r.expect_config, "publish").get("check_runs", options.get("publish", "check_runs").default))


def _client(repo: str | None, api_url: str | None, token_env: str) -> Client:
    from ds4ci.github.client import DEFAULT_API_URL, Client, connect

    token = os.environ.get(token_env, "")
    if not token:
        raise UsageError(f"no token: set the environment variable {token_env} (or use --dry-run)")
    url = api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL
    assert repo is not None  # validate_target requires it outside dry runs
    return Client(connect(token, url), repo)


def _run_pending(results: list[Path], request: PublishRequest, runner: str | None) -> int:
    from ds4ci.github import apply, facts, plan

    r = request
    sha = r.sha
    if results:
        raise UsageError("--pending posts a status for a gate that has not finished: give no results files")
    if runner is None or not publish.RUNNER_RE.match(runner):
        raise UsageError(f"--pending needs --runner NAME (letters, digits, . _ -); found {runner!r}")
    if sha is None:
        raise UsageError("--pending needs --sha: the full commit SHA the gate is running on")
    settings = facts.Settings(repo=r.repo, pr=r.pr, target_url=r.target_url, template_dir=r.template_dir,
                              comment_mode=commentmode.OFF if r.no_comment else "always",
                              comment_author=r.comment_author, own_run=own_run(r.target_url, r.repo))
    if r.dry_run:
        for status in plan.pending(runner, sha, settings, facts.Facts()).statuses:
            print(f"--- would set status {status.context}={status.state} on {status.sha}: {status.description}")
        print("--- dry run: nothing was sent ---")
        return 0
    client = _client(r.repo, r.api_url, r.token_env)
    found = facts.for_pending(client, settings, sha)  # every read before a write
    apply.apply(plan.pending(runner, sha, settings, found), client)
    return 0
