"""``ds4ci dispatch-check``: validate a gate run's inputs and event, verify a pinned head, emit the plan."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ds4ci.errors import EXIT_PASS, UsageError
from ds4ci.github import dispatch
from ds4ci.log import Logger
from ds4ci.options import configpath
from ds4ci.options import runners as runner_table_of


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "")
    return Path(value) if value else None


def _runner_table(config_file: Path | None, runner_table: str | None) -> tuple[runner_table_of.RunnerSpec, ...] | None:
    """The runners a run may select: --runner-table, else the config's (./ds4ci.toml when it exists), else none."""
    if config_file is not None and runner_table is not None:
        raise UsageError("--config and --runner-table both give the runner table; pass one")
    if runner_table is not None:
        return runner_table_of.parse_json(runner_table)
    config_file = configpath.resolve(config_file, "dispatch-check", quiet=True)
    return runner_table_of.from_file(config_file) if config_file is not None else None


def _check_this_run(repo: str, url: str, token: str, workflow: str, pull: dispatch.PullHead | None, head: str) -> None:
    """Refuse unless GitHub says this run ($GITHUB_RUN_ID) is a run of the trusted workflow file, for ``head``:
    the default branch's, whatever branch the pull request merges into (GitHub runs that file for
    pull_request_target; a dispatch must be made on it)."""
    from ds4ci.github import provenance

    text = os.environ.get("GITHUB_RUN_ID", "")
    if not text.isdigit() or text.startswith("0"):
        raise UsageError(f"--trusted-workflow: GITHUB_RUN_ID must name this run, found {text!r}")
    record = provenance.parse_run(dispatch.fetch_run(repo, int(text), api_url=url, token=token), int(text))
    default = dispatch.fetch_default_branch(repo, api_url=url, token=token)
    why = provenance.problem(record, repo=repo, workflow=workflow, default_branch=default, head=head)
    if why is not None:
        raise dispatch.DefinitionChangeError(f"refusing to gate: this is not a run of the trusted gate: {why}")
    into = f"; the pull request merges into {pull.base_ref}" if pull is not None and pull.base_ref else ""
    print(f"trusted definition: run {record.id} runs {workflow} of the default branch {default} ({record.event}){into}; "
          f"the settings are {default}'s")


def run_dispatch_check(
    *,
    config_file: Path | None = None,
    pr: str,
    head_sha: str,
    widths: str,
    runners: str,
    runner_table: str | None,
    repo: str | None,
    api_url: str | None,
    token_env: str,
    event_name: str | None,
    github_output: Path | None,
    refuse_definition_changes: bool = False,
    trusted_workflow: str | None = None,
) -> int:
    """Print the plan; append it to ``$GITHUB_OUTPUT`` when set. Raises Ds4ciError on refusal."""
    table = _runner_table(config_file, runner_table)
    event = dispatch.read_event(
        event_name if event_name is not None else os.environ.get("GITHUB_EVENT_NAME", ""),
        _env_path("GITHUB_EVENT_PATH"),
        os.environ.get("GITHUB_SHA") or None,
    )
    run = dispatch.plan(event, pr=pr, head_sha=head_sha, widths=widths, runners=runners, runner_table=table)

    repo_name = repo or os.environ.get("GITHUB_REPOSITORY", "")
    url = api_url or os.environ.get("GITHUB_API_URL") or "https://api.github.com"
    token = os.environ.get(token_env, "")
    actual: dispatch.PullHead | None = None
    if run.verify_head or (trusted_workflow is not None and run.pr is not None):
        assert run.pr is not None
        actual = dispatch.fetch_pull_head(repo_name, run.pr, api_url=url, token=token)
    if run.verify_head:
        assert actual is not None  # plan() sets verify_head only for a named PR
        dispatch.check_pinned_head(run, actual)
        print(f"pinned head verified: #{run.pr} is open at {run.head_sha}")
    if trusted_workflow is not None:
        _check_this_run(repo_name, url, token, trusted_workflow, actual, run.head_sha)
    if event.name == dispatch.MERGE_GROUP:
        print(f"merge queue: gating the merge commit {run.head_sha}"
              + (f" of pull request #{run.queued_pr}'s entry" if run.queued_pr is not None else ""))
    if refuse_definition_changes:
        _refuse_definition_changes(run, event.name, repo_name, url, token)

    values = dispatch.outputs(run)
    for key, value in values.items():
        print(f"{key}={value}")
    out = github_output if github_output is not None else _env_path("GITHUB_OUTPUT")
    if out is not None:
        dispatch.write_outputs(out, values)
    return EXIT_PASS


def _refuse_definition_changes(run: dispatch.RunPlan, event_name: str, repo_name: str, url: str, token: str) -> None:
    """Refuse a pull request that changes the gate's own definition, unless a maintainer dispatched it (then a
    warning); a merge queue's commit is refused when it differs from the default branch in any definition file."""
    changes_of = run.pr if run.pr is not None else run.queued_pr
    if event_name == dispatch.MERGE_GROUP and changes_of is None:
        raise dispatch.DefinitionChangeError(
            f"the merge queue's commit {run.head_sha} names no pull request (merge_group.head_ref is not "
            "gh-readonly-queue/<branch>/pr-<N>-<sha>), so whether it changes the gate's own definition is unknown; "
            "refusing to gate it")
    if changes_of is None:
        return
    if event_name == dispatch.MERGE_GROUP:
        # The whole group: the merge commit holds every entry ahead of this one too, and each one's changes.
        default = dispatch.fetch_default_branch(repo_name, api_url=url, token=token)
        files = dispatch.fetch_compare_files(repo_name, default, run.head_sha, api_url=url, token=token)
    else:
        files = dispatch.fetch_pull_files(repo_name, changes_of, api_url=url, token=token)
    changed = dispatch.definition_changes(files)
    dispatch.refuse_definition_changes(run, changed, event_name)
    if changed:
        Logger.from_env(sys.stdout).warning(f"pull request #{run.pr} changes the gate's own definition "
                                            f"({', '.join(changed)}); gated because a maintainer dispatched it")
