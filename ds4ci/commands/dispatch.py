"""``ds4ci dispatch-check``: validate a gate run's inputs and event, verify a pinned head, emit the plan."""

from __future__ import annotations

import os
from pathlib import Path

from ds4ci.errors import EXIT_PASS, UsageError
from ds4ci.github import dispatch
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
) -> int:
    """Print the plan; append it to ``$GITHUB_OUTPUT`` when set. Raises Ds4ciError on refusal."""
    table = _runner_table(config_file, runner_table)
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
