"""Typer wiring of the commands that talk to GitHub: ``publish``, ``dispatch-check``, ``merge-check``.

``merge-check``'s ``[merge]`` flags come from the options table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ds4ci.commands.finish import exit_with
from ds4ci.commands.flags import table_flags
from ds4ci.options import table

_API_URL_HELP = "GitHub API base URL. Default: $GITHUB_API_URL or https://api.github.com."
_TOKEN_ENV_HELP = "Name of the environment variable holding the token."  # noqa: S105 - a help text


_Results = Annotated[
    list[Path] | None,
    typer.Argument(
        metavar="BUNDLE...",
        help="One evidence bundle per runner (promoted attempt directory or the gate's --bundle-out .tar.gz), "
        "or a results.json whose bundle is at its recorded evidence location. Every bundle is verified first."
    ),
]
_Pending = Annotated[
    bool, typer.Option("--pending", help="Post a pending ds4ci/<runner> status (job start); needs --runner and --sha.")
]
_SummaryFile = Annotated[
    Path | None,
    typer.Option(help="Where the job summary goes. Default: $GITHUB_STEP_SUMMARY when set."),
]
_Unverified = Annotated[
    bool,
    typer.Option(
        "--unverified", help="Accept a results.json without its bundle: comment labelled unverified, never a status."
    ),
]
_CommentAuthor = Annotated[
    str | None,
    typer.Option(
        help="Login the token comments as, for app installation tokens that cannot read /user "
        "(e.g. my-app[bot]). Default under Actions: github-actions[bot]."
    ),
]
_AllowFocusedReruns = Annotated[
    bool,
    typer.Option(
        "--allow-focused-reruns",
        help="Let a focused rerun (fewer widths than configured) pass on top of a full pass on an ancestor. "
        "Default: a focused pass stays pending ('full run required').",
    ),
]
_ExpectRunner = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME",
        help="A runner that should have reported; if it has no result here (busy or offline), the comment "
        "says what it last validated, what changed since and which run is still required. Repeatable.",
    ),
]
_ExpectConfig = Annotated[
    Path | None,
    typer.Option(
        help="The trusted ds4ci.toml (e.g. the base branch's copy): a bundle made with other widths, repeats, "
        "prompts, pins or checks than it allows is published as error (a focused rerun's widths are a subset).",
    ),
]
_CheckRuns = Annotated[
    bool | None,
    typer.Option(
        "--check-runs/--no-check-runs",
        help="Create or update one check run ds4ci/<runner> per runner besides its status (needs `checks: write` "
        "and a GitHub App token such as GITHUB_TOKEN). Default: [publish] check_runs of --expect-config, else on.",
        show_default=False,
    ),
]
_CommentRecord = Annotated[Path | None, typer.Option(
    metavar="FILE", help='Once the comment is written, its id and the SHA-256 of its body as GitHub returned it, as '
    'one JSON line {"comment_id": N, "sha256": HEX, "artifact": "ds4ci-comment-N-<32 hex of HEX>"}: gate.yml '
    "uploads it as an artifact of that name, the record that makes the comment (with exactly that text) ds4ci's "
    "where the token posts as github-actions[bot] (docs/security.md).")]
_CalibrationRecord = Annotated[Path | None, typer.Option(
    metavar="FILE", help='Once everything was posted, the day of each gate runner\'s calibration its verified bundle '
    'cites, as one JSON line {"artifact": "ds4ci-calibrated--RUNNER=YYYY-MM-DD...", "calibrated": {...}} (artifact '
    "null where none cites one): gate.yml uploads an artifact of that name, the record merge-check reads for "
    "merge.calibration_max_age_days (docs/merging.md).")]
_CommentMode = Annotated[
    str | None,
    typer.Option("--comment-mode", metavar="MODE", help=table.get("publish", "comment_mode").flag_help(),
                 show_default=False),
]
_MergeConfig = Annotated[
    Path | None,
    typer.Option(
        help="The trusted ds4ci.toml (the base branch's): its [merge] table names the required runners, checks and "
        "approvals, and the comment then shows the 'Review and merge status' checklist of `ds4ci merge-check` "
        "(needs --pr); its [runners.<name>] public_key lines make an unsigned or wrongly signed bundle an error."
    ),
]

_Calibrations = Annotated[Path | None, typer.Option(
    metavar="DIR", help="The runners' calibration records (`ds4ci calibrate --out`, or a folder of them): each gate "
    "runner's section cites the latest that matches its runner and tiny models, after verifying it, or says it was "
    "never calibrated.")]


def publish(
    results: _Results = None,
    repo: Annotated[str | None, typer.Option(metavar="OWNER/NAME", help="OWNER/NAME of the repository.")] = None,
    pr: Annotated[int | None, typer.Option(help="Pull request number: sticky comment + statuses on its head.")] = None,
    sha: Annotated[str | None, typer.Option(metavar="SHA", help="Full 40-hex commit SHA to set statuses on.")] = None,
    api_url: Annotated[str | None, typer.Option(metavar="URL", help=_API_URL_HELP)] = None,
    target_url: Annotated[str | None, typer.Option(metavar="URL", help="Link for the statuses (the workflow run).")] = None,
    token_env: Annotated[str, typer.Option(metavar="NAME", help=_TOKEN_ENV_HELP)] = "GITHUB_TOKEN",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Send nothing: write the comment, the job summary and "
                                          "each check run as Markdown files (--dry-run-dir) and list the statuses.")] = False,
    dry_run_dir: Annotated[Path | None, typer.Option(metavar="DIR", help="Where --dry-run writes comment.md, "
                                                     "summary.md and check-run-<runner>.md. Default: ./ds4ci-dry-run.")] = None,
    no_comment: Annotated[bool, typer.Option("--no-comment", help="Do not create or edit the sticky comment.")] = False,
    no_status: Annotated[bool, typer.Option("--no-status", help="Do not set commit statuses.")] = False,
    pending: _Pending = False,
    runner: Annotated[str | None, typer.Option(metavar="NAME", help="Runner name for --pending.")] = None,
    template_dir: Annotated[Path | None, typer.Option(help="Directory of Jinja2 templates overriding the bundled ones.")] = None,
    summary_file: _SummaryFile = None,
    unverified: _Unverified = False,
    comment_author: _CommentAuthor = None,
    allow_focused_reruns: _AllowFocusedReruns = False,
    expect_runner: _ExpectRunner = None,
    merge_config: _MergeConfig = None,
    expect_config: _ExpectConfig = None,
    check_runs: _CheckRuns = None,
    calibrations: _Calibrations = None,
    verdicts_out: Annotated[Path | None, typer.Option(metavar="FILE", help="After everything was posted, write "
                            "each runner's decided state as one JSON line {runner: state} (gate.yml's job `verdict "
                            "<runner>` succeeds only on success). Nothing is written when publish fails.")] = None,
    comment_mode: _CommentMode = None,
    comment_record: _CommentRecord = None,
    calibration_record: _CalibrationRecord = None,
    bisect: Annotated[list[Path] | None, typer.Option(metavar="FILE", help="A runner's `ds4ci bisect --json` result "
                      "on this head: a section of the comment and the job summary naming the first failing commit "
                      "(never a status). Repeatable, one per runner.")] = None,
) -> None:
    """Post the sticky PR comment and one commit status per runner (context ds4ci/<runner>), and a check run
    of the same name from the same verified result (unless --no-check-runs).

    Statuses rest on `ds4ci verify`'s recomputation from each evidence bundle, never on results.json
    alone: a bundle that does not verify is published as error. Only a passing, verified result whose
    sealed revisions name exactly the commit being set can ever become a green status. A negative
    control's pass is success with "negative control: ...". --unverified results set no status.

    Exit codes: 0 published (a failing gate published correctly too), 2 refused input (nothing is posted),
    3 GitHub API error.
    """
    from ds4ci.commands.publish import PublishRequest, run_publish

    request = PublishRequest(
        repo=repo, pr=pr, sha=sha, api_url=api_url, target_url=target_url, token_env=token_env, dry_run=dry_run,
        no_comment=no_comment, no_status=no_status, template_dir=template_dir, summary_file=summary_file,
        comment_author=comment_author, allow_focused=allow_focused_reruns, merge_config=merge_config,
        expect_runners=tuple(expect_runner or ()), expect_config=expect_config, check_runs=check_runs,
        dry_run_dir=dry_run_dir, calibrations=calibrations, verdicts_out=verdicts_out, comment_mode=comment_mode,
        bisects=tuple(bisect or ()), comment_record=comment_record, calibration_record=calibration_record,
    )
    exit_with(
        lambda: run_publish(results or [], request, pending=pending, runner=runner, unverified=unverified)
    )


def dispatch_check(
    pr: Annotated[str, typer.Option(metavar="N", help="Pull request number (required for workflow_dispatch).")] = "",
    head_sha: Annotated[
        str, typer.Option(metavar="SHA", help="Full 40-hex head SHA the maintainer reviewed; refused if the PR moved.")
    ] = "",
    widths: Annotated[str, typer.Option(metavar="Q,Q",
                                        help="Comma-separated widths, e.g. 2,3,4; empty: those of ds4ci.toml.")] = "",
    runners: Annotated[str, typer.Option(metavar="all|NAME,NAME",
                                         help="'all' or comma-separated runner names, e.g. gfx1151,sm86.")] = "all",
    config: Annotated[
        Path | None,
        typer.Option(help="ds4ci.toml whose runner table ([runners.<name>], as `ds4ci config runners` prints it) "
                     "the run selects from. Default: ./ds4ci.toml when it exists."),
    ] = None,
    runner_table: Annotated[
        str | None,
        typer.Option(help='The runner table as JSON instead of --config: [{"name", "labels", "queue", "role"}, ...] '
                     "(`ds4ci config runners --json` prints it; role optional)."),
    ] = None,
    repo: Annotated[str | None, typer.Option(metavar="OWNER/NAME", help="OWNER/NAME. Default: $GITHUB_REPOSITORY.")] = None,
    api_url: Annotated[str | None, typer.Option(metavar="URL", help=_API_URL_HELP)] = None,
    token_env: Annotated[str, typer.Option(metavar="NAME", help=_TOKEN_ENV_HELP)] = "GITHUB_TOKEN",
    event_name: Annotated[str | None, typer.Option(metavar="EVENT",
                                                   help="Triggering event. Default: $GITHUB_EVENT_NAME.")] = None,
    github_output: Annotated[
        Path | None, typer.Option(help="Append the plan as step outputs here. Default: $GITHUB_OUTPUT when set.")
    ] = None,
    refuse_definition_changes: Annotated[
        bool, typer.Option(help="Refuse (exit 2) a pull request that changes the gate's own files (.github/workflows/, "
                           ".github/actions/, action.yml, ds4ci.toml) unless the event is workflow_dispatch.")
    ] = False,
    trusted_workflow: Annotated[
        str | None, typer.Option(help="Refuse (exit 2) unless GitHub says this run ($GITHUB_RUN_ID) ran this workflow "
                                 "file from pull_request_target, or from workflow_dispatch on the PR's base branch.")
    ] = None,
) -> None:
    """Validate a gate run's inputs against its event; verify a pinned PR head; print the run plan.

    Exit 0 with outputs pr, head-sha, widths, runners, matrix, fork; 2 on bad input or a moved head;
    3 when GitHub could not be asked.
    """
    from ds4ci.commands.dispatch import run_dispatch_check

    exit_with(
        lambda: run_dispatch_check(
            config_file=config,
            pr=pr,
            head_sha=head_sha,
            widths=widths,
            runners=runners,
            runner_table=runner_table,
            repo=repo,
            api_url=api_url,
            token_env=token_env,
            event_name=event_name,
            github_output=github_output,
            refuse_definition_changes=refuse_definition_changes,
            trusted_workflow=trusted_workflow,
        )
    )


@table_flags("merge-check")
def merge_check(
    pr: Annotated[int, typer.Option(help="Pull request number.")],
    repo: Annotated[str | None, typer.Option(metavar="OWNER/NAME", help="OWNER/NAME. Default: $GITHUB_REPOSITORY.")] = None,
    api_url: Annotated[str | None, typer.Option(metavar="URL", help=_API_URL_HELP)] = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON object on stdout: repo, pr, head, ready, exit_code and the "
                     "conditions (name, ok, detail: the reason when unmet)."),
    ] = False,
    config: Annotated[Path | None, typer.Option(help="ds4ci.toml whose [merge] table gives runners, checks, approvals. "
                                                "Default: ./ds4ci.toml when it exists.")] = None,
    **settings: Any,
) -> None:
    """Is the pull request ready to merge on its exact current head?

    Only the publisher's ds4ci/<runner> statuses count (--publisher, default github-actions[bot]), and
    a check only from its app or account ([[merge.checks]], or --check NAME@APP); others are listed as ignored.
    Ready only when every gate runner and named check is green on the head, enough approvals are
    on the head, no changes are requested, no review thread is unresolved, and the PR is open,
    not a draft and mergeable. Token from $GITHUB_TOKEN. Exit 0 ready, 1 not ready (one line per
    unmet condition), 2 usage error, 3 GitHub error.
    """
    from ds4ci.commands.merge_check import run_merge_check

    need = table.overrides("merge-check", settings)
    exit_with(
        lambda: run_merge_check(
            pr=pr, repo=repo, api_url=api_url, runners=need["runners"], checks=need["checks"],
            approvals=need["approvals"], as_json=json_out, config=config, publisher=need["publisher"],
            workflow=need["workflow"],
        )
    )
