"""``ds4ci dispatch-check``: validate a gate run's inputs and event, verify a pinned head, emit the plan."""

from __future__ import annotations

import os
from pathlib import Path

from ds4ci.errors import EXIT_PASS
from ds4ci.github import dispatch


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "")
    return Path(value) if value else None


def run_dispatch_check(
    *,
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
) -> int:
    """Print the plan; append it to ``$GITHUB_OUTPUT`` when set. Raises Ds4ciError on refusal."""
    table = dispatch.parse_runner_table(runner_table) if runner_table else dispatch.DEFAULT_RUNNERS
    event = dispatch.read_event(
        event_name if event_name is not None else os.environ.get("GITHUB_EVENT_NAME", ""),
        _env_path("GITHUB_EVENT_PATH"),
        os.environ.get("GITHUB_SHA") or None,
    )
    run = dispatch.plan(event, pr=pr, head_sha=head_sha, widths=widths, runners=runners, runner_table=table)

    if run.verify_head:
        assert run.pr is not None  # plan() sets verify_head only for a named PR
        repo_name = repo or os.environ.get("GITHUB_REPOSITORY", "")
        url = api_url or os.environ.get("GITHUB_API_URL") or "https://api.github.com"
        actual = dispatch.fetch_pull_head(repo_name, run.pr, api_url=url, token=os.environ.get(token_env, ""))
        dispatch.check_pinned_head(run, actual)
        print(f"pinned head verified: #{run.pr} is open at {run.head_sha}")

    values = dispatch.outputs(run)
    for key, value in values.items():
        print(f"{key}={value}")
    out = github_output if github_output is not None else _env_path("GITHUB_OUTPUT")
    if out is not None:
        dispatch.write_outputs(out, values)
    return EXIT_PASS
