"""`ds4ci publish`: sticky PR comment + one commit status per runner.

Exit codes: 0 everything was posted (a *failing* gate published correctly is still 0: the
gate's own exit code gates the job); 2 bad input or refused (malformed, stale or ambiguous
results, bad flags, no token); 3 GitHub failed or refused (read-only token, outage).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ds4ci.commands import commentmode
from ds4ci.errors import PublishError, UsageError
from ds4ci.github import checkruns, publish
from ds4ci.github.client import ReadOnlyTokenError
from ds4ci.options import table as options
from ds4ci.options.table import DEFAULT_WIDTHS

if TYPE_CHECKING:
    from ds4ci.github.client import Client
    from ds4ci.github.merge import Vouch
    from ds4ci.github.publish import Vouched
    from ds4ci.github.verified import Published
    from ds4ci.records import Results
    from ds4ci.report.sections import Section


def _write_summary(body: str, summary_file: Path | None) -> None:
    env_file = os.environ.get("GITHUB_STEP_SUMMARY")
    target = summary_file or (Path(env_file) if env_file else None)
    if target is None:
        return
    try:
        # $GITHUB_STEP_SUMMARY is shared by the job's steps: append, never replace.
        with target.open("a", encoding="utf-8") as fh:
            fh.write(body)
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

    def cited(self, docs: list[Results]) -> dict[str, str]:
        """Each gate runner's calibration line (``ds4ci.calibrate.latest``); {} without --calibrations."""
        from ds4ci.calibrate.latest import cite_all

        return cite_all(self.calibrations, docs)


def run_publish(
    results: list[Path], request: PublishRequest, *, pending: bool = False, runner: str | None = None,
    unverified: bool = False,
) -> int:
    """The CLI's publish: every input is verified first (``verified``), then published."""
    from ds4ci.github import verified

    publish.validate_target(request.repo, request.pr, request.sha, request.dry_run)
    if request.dry_run_dir is not None and not request.dry_run:
        raise UsageError("--dry-run-dir names where --dry-run writes its files; pass --dry-run too, or leave it out")
    if pending:
        return _run_pending(results, request, runner)
    if runner is not None:
        raise UsageError("--runner is only used with --pending (results name their runner)")
    from ds4ci.report.render import check_inputs

    check_inputs(results)
    expected, keys = None, {}
    if request.expect_config is not None:
        from ds4ci.evidence.verify import expectations

        expected = expectations(request.expect_config)
    for config in (request.expect_config, request.merge_config):  # runner keys named by a trusted config
        if config is not None:
            keys.update(_trusted_keys(config))
    return publish_documents(verified.load(results, verified.Trust(expected, unverified, keys)), request)


def _trusted_keys(config_file: Path) -> dict[str, tuple[str, ...]]:
    from ds4ci.evidence import attestation

    return attestation.trusted_keys(config_file)


def publish_documents(published: list[Published], request: PublishRequest) -> int:
    """Comment and statuses for documents the trust step (``verified.load``) has already judged."""
    from ds4ci.report import render

    mode = commentmode.resolve(request.comment_mode, request.no_comment, request.expect_config)
    r = dataclasses.replace(request, no_comment=mode == commentmode.OFF)
    publish.validate_target(r.repo, r.pr, r.sha, r.dry_run)
    docs = render.unique_runners([p.doc for p in published])
    cited = r.cited(docs)
    update_only = commentmode.update_only(mode, docs)
    summary, _ = render.render(docs, kind="summary", run_url=r.target_url, template_dir=r.template_dir,
                               calibrations=cited)
    _write_summary(summary, r.summary_file)

    head = publish.results_head(docs, r.sha)
    trusted = [p.doc for p in published if p.may_set_status]
    # The decision per runner; posted as a status (unless --no-status) and as a check run (unless turned off).
    plans = publish.plan_statuses(trusted, head, r.target_url) if trusted else []
    client = None if r.dry_run else _client(r.repo, r.api_url, r.token_env)
    # Whose statuses count in the history (predecessors, an ancestor's full pass): our own identity's.
    needs_history = not r.no_comment or any(d["settings"].get("scope") == "focused" for d in docs)
    publisher = client.identity(r.comment_author) if client is not None and r.pr is not None and needs_history else None
    vouched = _voucher(client, r.pr, publisher, r.merge_config or r.expect_config)
    plans = _focused(plans, docs, client, r.pr, head, r.allow_focused, publisher, vouched)
    for p in published:
        if not p.may_set_status:
            print(f"ds4ci: no status for {p.doc['runner']['name']}: its result is unverified", file=sys.stderr)
    check_runs = _wants_check_runs(r)
    if client is None:
        return _dry_run(published, plans, dataclasses.replace(r, no_comment=r.no_comment or update_only), head,
                        check_runs)

    author = _comment_author(client, r, head, publisher, update_only) if r.pr is not None else None
    predecessors = _predecessors(client, r.pr, head, docs, author, vouched) if author and r.pr is not None else {}
    for plan in [] if r.no_status else plans:
        client.create_status(plan.sha, plan.state, plan.context, plan.description, plan.target_url)
        print(f"ds4ci: status {plan.context}={plan.state} on {plan.sha}", file=sys.stderr)
    if check_runs and plans:
        runs = _check_run_plans(published, plans, r, head, predecessors)
        _post_check_runs(client, runs, head, publisher or _identity_or_none(client, r.comment_author))
    if author is not None and r.pr is not None:
        merge_status = _merge_status(client, r.pr, r.merge_config, r.api_url, r.token_env) if r.merge_config else []
        missing = _needs_hardware(client, r.pr, head, docs, r.expect_runners, r.template_dir, author, vouched)
        build = publish.BodyBuilder(docs, run_url=r.target_url, template_dir=r.template_dir, predecessors=predecessors,
                                    merge_status=merge_status, extra=missing, calibrations=cited)
        outcome = publish.upsert_comment(client, r.pr, author, build)
        print(f"ds4ci: comment {outcome.comment_id} {outcome.action} on #{r.pr}", file=sys.stderr)
    if r.verdicts_out is not None:  # last: a publish that failed on the way leaves no verdict (fail closed)
        publish.write_verdicts(r.verdicts_out, plans)
    return 0


def _comment_author(client: Client, r: PublishRequest, head: str, publisher: str | None,
                    update_only: bool) -> str | None:
    """Every precondition before the first write: the PR still at the results' head; whose comment to update
    (None: no comment, by --no-comment, comment_mode, or no earlier comment to update)."""
    assert r.pr is not None
    current = client.pr_head(r.pr)
    if current != head:
        raise publish.StaleResultsError(
            f"pull request #{r.pr} is now at {current} but the results are for {head}: refusing to publish "
            "stale results (re-run the gate on the new head)"
        )
    if not r.no_comment and (not update_only or publish.has_own_comment(client, r.pr, publisher)):
        return publisher
    if update_only:
        print(f"ds4ci: no comment on #{r.pr}: every runner's status is success (comment_mode = failures)",
              file=sys.stderr)
    return None


DRY_RUN_DIR = Path("ds4ci-dry-run")


def _dry_run(published: list[Published], plans: list[publish.StatusPlan], r: PublishRequest, head: str,
             check_runs: bool) -> int:
    """What publish would send, as Markdown files (the comment, the job summary, each check run) and a listing on
    stdout; nothing is sent."""
    from ds4ci.fileio import write_text_atomic
    from ds4ci.report import render

    docs = [p.doc for p in published]
    runs = _check_run_plans(published, plans, r, head, {}) if check_runs else []
    cited = r.cited(docs)
    body, _ = render.render(docs, kind="comment", run_url=r.target_url, template_dir=r.template_dir, calibrations=cited)
    summary, _ = render.render(docs, kind="summary", run_url=r.target_url, template_dir=r.template_dir,
                               calibrations=cited)
    folder = r.dry_run_dir or DRY_RUN_DIR
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--dry-run-dir {folder}: expected a folder, found a file")
    folder.mkdir(parents=True, exist_ok=True)
    files: list[tuple[Path, str]] = [(folder / "summary.md", summary)]
    if r.pr is not None and not r.no_comment:
        files.append((folder / "comment.md", body))
    for run in runs:
        files.append((folder / f"check-run-{run.name.removeprefix('ds4ci/')}.md",
                      f"# {run.name}: {run.conclusion}\n\n**Title**: {run.title}\n\n## Summary\n\n{run.summary}\n\n"
                      f"## Text\n\n{run.text}\n"))
    for path, text in files:
        write_text_atomic(path, text)
    out = sys.stdout
    if r.pr is not None and not r.no_comment:
        out.write(f"--- would create or update the ds4ci comment on {r.repo or '(repo)'}#{r.pr}: {folder / 'comment.md'} "
                  f"({len(body.splitlines())} lines) ---\n{body}")
    for plan in [] if r.no_status else plans:
        out.write(f"--- would set status {plan.context}={plan.state} on {plan.sha}: {plan.description}\n")
    for run in runs:
        out.write(f"--- would create or update check run {run.name}={run.conclusion} on {run.head_sha}: "
                  f"{run.title} ({len(run.annotations)} annotation(s)): "
                  f"{folder / ('check-run-' + run.name.removeprefix('ds4ci/') + '.md')}\n")
    out.write(f"--- would write the job summary: {folder / 'summary.md'} ---\n")
    out.write("--- dry run: nothing was sent (the PR's current head is not checked) ---\n")
    return 0


def _voucher(client: Client | None, pr: int | None, publisher: str | None, config: Path | None) -> Vouched | None:
    """What vouches for an older commit's green (ds4ci.github.vouch), as the trusted config's [merge] table says."""
    from ds4ci.github import mergeconfig, mergefacts, vouch

    if client is None or pr is None or publisher is None:
        return None
    need = mergeconfig.trusted_gate(mergeconfig.load_merge_table(config) if config is not None else {}, publisher)
    made: list[vouch.Voucher] = []

    def judged(sha: str, runner: str) -> Vouch:  # the PR's base branch is read only when a green is judged
        if not made:
            made.append(vouch.Voucher(client, client.repo, need, mergefacts.pull_facts(pr, client.pull(pr)).base_ref))
        return made[0].judge_commit(sha, runner)

    return judged


def _predecessors(client: Client, pr: int, head: str, docs: list[Results], publisher: str,
                  vouched: Vouched | None) -> dict[str, str]:
    """runner -> its last hardware-validated predecessor, for each runner that did not pass."""
    found = {}
    for doc in docs:
        if doc["verdict"] != "pass":
            older = publish.last_validated_predecessor(client, pr, head, doc["runner"]["name"], publisher, vouched)
            if older:
                found[doc["runner"]["name"]] = older
    return found


def _wants_check_runs(r: PublishRequest) -> bool:
    """--check-runs / --no-check-runs, else ``[publish] check_runs`` of the trusted config, else true."""
    if r.check_runs is not None:
        return r.check_runs
    if r.expect_config is None:
        return bool(options.get("publish", "check_runs").default)
    from ds4ci.options.sections import read_section

    return bool(read_section(r.expect_config, "publish").get("check_runs", options.get("publish", "check_runs").default))


def _check_run_plans(
    published: list[Published], plans: list[publish.StatusPlan], r: PublishRequest, head: str,
    predecessors: dict[str, str],
) -> list[checkruns.CheckRunPlan]:
    """One check run per runner that gets a status: the same document, the same decision, the same head."""
    from ds4ci.report import render

    env = render.environment(r.template_dir)
    by_context = {f"ds4ci/{p.doc['runner']['name']}": p for p in published if p.may_set_status}
    cited = r.cited([p.doc for p in by_context.values()])
    return [
        checkruns.plan(by_context[plan.context].doc, plan.state, plan.description, head, env=env,
                       run_url=r.target_url, predecessor=predecessors.get(plan.context.removeprefix("ds4ci/")),
                       signature=by_context[plan.context].signature,
                       calibration=cited.get(plan.context.removeprefix("ds4ci/")))
        for plan in plans
    ]


def _identity_or_none(client: Client, comment_author: str | None) -> str | None:
    try:
        return client.identity(comment_author)
    except PublishError:
        return None  # an app token outside Actions: its check runs are created, never looked up


def _post_check_runs(client: Client, runs: list[checkruns.CheckRunPlan], head: str, identity: str | None) -> None:
    """Create each runner's check run, or update the one this app made on this head before."""
    from ds4ci.github import shapes

    if identity is not None and checkruns.app_of(identity) is None:
        print(f"ds4ci: no check runs: {identity} is not a GitHub App's account (a personal token cannot create "
              "check runs; the statuses were set); set [publish] check_runs = false to stop this note",
              file=sys.stderr)
        return
    app = checkruns.app_of(identity)
    existing = shapes.check_runs(client.check_runs(head), head) if app is not None else ()
    for run in runs:
        mine = checkruns.own_run(existing, run.name, head, app)
        try:
            if mine is not None:
                client.update_check_run(mine.id, run.name, run.conclusion, run.details_url, run.output())
            else:
                mine_id, _ = client.create_check_run(run.name, head, run.conclusion, run.details_url, run.output())
        except ReadOnlyTokenError:
            raise PublishError(
                f"GitHub refused check run {run.name}: the token may not write checks (the statuses were set). Give "
                "the publishing job `permissions: checks: write`, or set [publish] check_runs = false "
                "(--no-check-runs); a fork's read-only token publishes through report.yml instead"
            ) from None
        how = f"updated ({mine.id})" if mine is not None else f"created ({mine_id})"
        print(f"ds4ci: check run {run.name}={run.conclusion} {how} on {head}", file=sys.stderr)


def _focused(
    plans: list[publish.StatusPlan], docs: list[Results], client: Client | None, pr: int | None, head: str,
    allowed: bool, publisher: str | None, vouched: Vouched | None = None,
) -> list[publish.StatusPlan]:
    """Focused reruns: green only on top of a full pass on an ancestor where allowed; the comment says which."""
    by_context = {f"ds4ci/{d['runner']['name']}": d for d in docs}
    out = []
    for plan in plans:
        doc = by_context[plan.context]
        if doc["settings"].get("scope") != "focused":
            out.append(plan)
            continue
        runner = doc["runner"]["name"]
        full = None
        if client is not None and pr is not None and publisher is not None:
            full = publish.last_full_pass(client, pr, head, runner, publisher, vouched)
        decided = publish.focused_plan(plan, doc, full, allowed)
        doc.setdefault("warnings", []).insert(0, f"focused rerun: status {decided.state}: {decided.description}")
        out.append(decided)
    return out


def _needs_hardware(
    client: Client, pr: int, head: str, docs: list[Results], expected: Sequence[str], template_dir: Path | None,
    publisher: str, vouched: Vouched | None = None,
) -> list[Section]:
    """A section for every expected runner without a result on this head (busy or offline)."""
    from ds4ci.report import render

    present = {d["runner"]["name"] for d in docs}
    widths = next((w for d in docs if (w := d["settings"].get("configured_widths"))), list(DEFAULT_WIDTHS))
    env = render.environment(template_dir)
    sections = []
    for runner in expected:
        if runner in present:
            continue
        if not publish.RUNNER_RE.match(runner):
            raise UsageError(f"--expect-runner {runner!r}: expected letters, digits, '.', '_' or '-'")
        predecessor = publish.last_validated_predecessor(client, pr, head, runner, publisher, vouched)
        commits, files = client.compare(predecessor, head) if predecessor else ([], [])
        sections.append(render.needs_hardware_section(env, runner, head, widths, predecessor, commits, files))
    return sections


def _merge_status(client: Client, pr: int, merge_config: Path, api_url: str | None, token_env: str) -> list[str]:
    """The "Review and merge status" checklist, read after this run's statuses were set."""
    from ds4ci.github import merge, mergeconfig, mergefacts
    from ds4ci.github.client import DEFAULT_API_URL, THROTTLE_ENV

    need = mergeconfig.requirements(merge_config, None, None, None)  # the publisher: merge.publisher of that file
    url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    polite = os.environ.get(THROTTLE_ENV, "1") != "0"
    gql = mergefacts.GraphQL(mergefacts.graphql_url(url), os.environ.get(token_env, ""), backoff_s=1.0 if polite else 0.0)
    facts = mergefacts.gather(client, gql, client.repo, pr, need, mergeable_delay_s=2.0 if polite else 0.0)
    return merge.checklist_markdown(merge.evaluate(facts, need))


def _client(repo: str | None, api_url: str | None, token_env: str) -> Client:
    from ds4ci.github.client import DEFAULT_API_URL, Client, connect

    token = os.environ.get(token_env, "")
    if not token:
        raise UsageError(f"no token: set the environment variable {token_env} (or use --dry-run)")
    url = api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL
    assert repo is not None  # validate_target requires it outside dry runs
    return Client(connect(token, url), repo)


def _run_pending(results: list[Path], request: PublishRequest, runner: str | None) -> int:
    from ds4ci.report import render

    r = request
    sha = r.sha

    if results:
        raise UsageError("--pending posts a status for a gate that has not finished: give no results files")
    if runner is None or not publish.RUNNER_RE.match(runner):
        raise UsageError(f"--pending needs --runner NAME (letters, digits, . _ -); found {runner!r}")
    if sha is None:
        raise UsageError("--pending needs --sha: the full commit SHA the gate is running on")
    context = f"ds4ci/{runner}"
    description = f"running the parity gate on {runner}"
    if r.dry_run:
        print(f"--- would set status {context}=pending on {sha}: {description}")
        print("--- dry run: nothing was sent ---")
        return 0
    client = _client(r.repo, r.api_url, r.token_env)
    if r.pr is not None and client.pr_head(r.pr) != sha:
        raise publish.StaleResultsError(f"--sha {sha} is not the current head of pull request #{r.pr}")
    author = client.identity(r.comment_author) if r.pr is not None and not r.no_comment else None  # before any write
    client.create_status(sha, "pending", context, description, r.target_url)
    if author is not None and r.pr is not None:
        env = render.environment(r.template_dir)
        section = render.pending_section(env, runner, sha, r.target_url)
        build = publish.BodyBuilder([], run_url=r.target_url, template_dir=r.template_dir, predecessors={},
                                    extra=[section])
        publish.upsert_comment(client, r.pr, author, build)
    return 0
