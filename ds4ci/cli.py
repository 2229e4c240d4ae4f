"""The ``ds4ci`` command line: options in, one library call, exit code out.

Heavy libraries (PyGithub, Jinja2, requests, jsonschema) are imported inside the commands
that need them, so ``ds4ci --help`` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from ds4ci import __version__
from ds4ci.errors import EXIT_ERROR, Ds4ciError

app = typer.Typer(
    name="ds4ci",
    help=(
        "DS4 reference-exact speculative-decoding parity gate.\n\n"
        "Runs the inference server as plain greedy (target-only) decoding and with reference-exact "
        "speculative decoding at several draft widths, proves the token IDs are identical and that "
        "speculation really ran and rolled back, keeps the evidence, and reports to pull requests.\n\n"
        "Exit codes: 0 pass, 1 fail (contract violated), 2 usage or configuration error, "
        "3 error (no verdict could be reached)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _exit_with(command: Callable[[], int]) -> NoReturn:
    """Run one command's library call; its exit code, or a Ds4ciError's, ends the process."""
    try:
        code = command()
    except Ds4ciError as exc:
        typer.echo(f"ds4ci: error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from exc
    except Exception as exc:  # a bug in ds4ci: one line and exit 3 (no verdict), never a traceback or exit 1
        first = str(exc).splitlines()[0] if str(exc) else ""
        typer.echo(f"ds4ci: internal error (a bug in ds4ci, please report it): {type(exc).__name__}: {first}", err=True)
        raise typer.Exit(EXIT_ERROR) from exc
    raise typer.Exit(code)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ds4ci {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """DS4 reference-exact speculative-decoding parity gate."""


@app.command()
def gate(
    config: Annotated[Path | None, typer.Option(help="ds4ci.toml with the gate settings; flags below override it.")] = None,
    server_bin: Annotated[
        Path | None, typer.Option(help="The inference server binary (dflash_server, or any program speaking its protocol).")
    ] = None,
    server_sha256: Annotated[
        str | None, typer.Option(help="Pinned SHA-256 of the server binary; its identity is recorded either way.")
    ] = None,
    target: Annotated[Path | None, typer.Option(help="Target model file (GGUF).")] = None,
    target_sha256: Annotated[str | None, typer.Option(help="Pinned SHA-256 of the target model (required).")] = None,
    draft: Annotated[Path | None, typer.Option(help="Draft model file (GGUF).")] = None,
    draft_sha256: Annotated[str | None, typer.Option(help="Pinned SHA-256 of the draft model (required).")] = None,
    prompt_file: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="PATH", help="Prompt text file; repeat for several prompts, each paired in order with --prompt-sha256."
        ),
    ] = None,
    prompt_sha256: Annotated[
        list[str] | None,
        typer.Option(metavar="HEX", help="Pinned SHA-256 of the prompt file given in the same position."),
    ] = None,
    evidence_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory that keeps every attempt; finished runs are promoted here and never replaced. "
            "Default: ./ds4ci-evidence."
        ),
    ] = None,
    results_out: Annotated[
        Path | None, typer.Option(help="Also write results.json here (the evidence keeps its own copy).")
    ] = None,
    bundle_out: Annotated[
        Path | None,
        typer.Option(help="Also write the sealed evidence as one .tar.gz here, for `ds4ci verify` elsewhere."),
    ] = None,
    runner: Annotated[
        str | None, typer.Option(help="Runner name, used in the status context ds4ci/<runner>. Default: host name.")
    ] = None,
    widths: Annotated[
        str | None, typer.Option(help="Comma-separated draft widths q to prove, each >= 2. Default: 2,3,4.")
    ] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens generated per request (>= 2). Default: 96.")] = None,
    seed: Annotated[int | None, typer.Option(help="Request seed. Default: 1234.")] = None,
    repeats: Annotated[
        int | None, typer.Option(help="Requests per prompt on every server (lifecycle check). Default: 2.")
    ] = None,
    target_device: Annotated[
        str | None, typer.Option(help="Server --target-device, e.g. hip:0 or cuda:0. Default: hip:0.")
    ] = None,
    max_ctx: Annotated[int | None, typer.Option(help="Server --max-ctx. Default: 4096.")] = None,
    chunk: Annotated[int | None, typer.Option(help="Server --chunk. Default: 512.")] = None,
    mmvq_max_ncols: Annotated[
        int | None, typer.Option(help="LUCE_MMVQ_MAX_NCOLS for every arm; must be >= the largest width. Default: largest width.")
    ] = None,
    startup_timeout: Annotated[
        float | None, typer.Option(help="Seconds a server may take to answer /health. Default: 600.")
    ] = None,
    request_timeout: Annotated[float | None, typer.Option(help="Seconds one completion request may take. Default: 600.")] = None,
    stop_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds between SIGTERM and SIGKILL of a server's process group (freeing an 86 GB model takes "
            "tens of seconds). Default: 60."
        ),
    ] = None,
    server_arg: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ARG",
            help="Extra server argument, appended after the device defaults; repeat for several "
            "(write --server-arg=--flag for values starting with '-'). Config: server_args.",
        ),
    ] = None,
    log_cap_mib: Annotated[
        int | None, typer.Option(help="Cap on each server log stream in MiB; reaching it is an error (log flood). Default: 512.")
    ] = None,
    no_hash_cache: Annotated[
        bool, typer.Option("--no-hash-cache", help="Re-read every file instead of trusting the hash cache.")
    ] = False,
    no_build: Annotated[
        bool,
        typer.Option("--no-build", help="Skip the [build] step and use an existing binary (--server-bin or gate.server_bin)."),
    ] = False,
    note: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TEXT",
            help="A note for reviewers, recorded as a warning in results.json and shown in the comment "
            "(e.g. that the PR's own ds4ci.toml was not used); repeatable.",
        ),
    ] = None,
    source_dir: Annotated[
        Path | None,
        typer.Option(help="Git checkout of the server source; its revisions are recorded in results.json."),
    ] = None,
    base_ref: Annotated[str | None, typer.Option(help="Base ref for the revisions record (with --source-dir).")] = None,
    upstream_ref: Annotated[
        str | None, typer.Option(help="Upstream main ref for the revisions record (with --source-dir).")
    ] = None,
) -> None:
    """Run the parity gate: 1 target-only server + 1 reference-exact server per width.

    Every pinned SHA-256 is verified before any server starts. Evidence of the attempt is kept
    under --evidence-dir whatever the outcome.
    """
    from ds4ci.commands.gate import run_gate_command

    overrides = {
        "server_bin": server_bin,
        "server_sha256": server_sha256,
        "target": target,
        "target_sha256": target_sha256,
        "draft": draft,
        "draft_sha256": draft_sha256,
        "prompt_files": prompt_file,
        "prompt_sha256s": prompt_sha256,
        "evidence_dir": evidence_dir,
        "results_out": results_out,
        "bundle_out": bundle_out,
        "runner": runner,
        "widths": widths,
        "max_tokens": max_tokens,
        "seed": seed,
        "repeats": repeats,
        "target_device": target_device,
        "max_ctx": max_ctx,
        "chunk": chunk,
        "mmvq_max_ncols": mmvq_max_ncols,
        "startup_timeout": startup_timeout,
        "request_timeout": request_timeout,
        "stop_timeout": stop_timeout,
        "server_args": server_arg,
        "log_cap_mib": log_cap_mib,
        "hash_cache": False if no_hash_cache else None,
        "notes": note,
        "no_build": no_build or None,
        "source_dir": source_dir,
        "base_ref": base_ref,
        "upstream_ref": upstream_ref,
    }
    _exit_with(lambda: run_gate_command(config, overrides))


@app.command()
def verify(
    bundles: Annotated[
        list[Path], typer.Argument(help="Evidence bundles: promoted attempt directories or .tar.gz archives of them.")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the recomputed documents as JSON.")] = False,
    expect_config: Annotated[
        Path | None,
        typer.Option(
            help="Trusted ds4ci.toml (e.g. the base branch's): its widths, max_tokens, seed, repeats and pins "
            "must be what each bundle ran."
        ),
    ] = None,
) -> None:
    """Re-derive each bundle's verdict from its raw evidence; trust nothing in results.json.

    Checks every file against manifest.json, re-parses every server log, recomputes every verdict
    with the gate's own judging code and compares with results.json field by field.
    Exit 0: every bundle intact, consistent and passing; 1: intact and consistent, some failing;
    3: something does not verify (the message says what).
    """
    from ds4ci.commands.verify import run_verify

    _exit_with(lambda: run_verify(bundles, as_json=json_out, expect_config=expect_config))


hash_cache_app = typer.Typer(
    help="The SHA-256 cache the gate may use for big model files (see docs/identity.md).", no_args_is_help=True
)
app.add_typer(hash_cache_app, name="hash-cache")


@hash_cache_app.command("add")
def hash_cache_add(
    files: Annotated[list[Path], typer.Argument(help="Files to hash and record (e.g. the pinned model files).")],
    cache: Annotated[
        Path | None,
        typer.Option(help="Cache file to fill; the gate reads it through hash_cache_path. Default: the user's cache."),
    ] = None,
) -> None:
    """Hash files and record them in a hash cache, e.g. a root-owned one the gate reads but PR code cannot write."""
    from ds4ci.commands.hashcache import run_hash_cache_add

    _exit_with(lambda: run_hash_cache_add(files, cache))


@app.command()
def demo(
    keep: Annotated[
        Path | None, typer.Option(help="Keep the demo workspace (models, evidence, results) in this new directory.")
    ] = None,
) -> None:
    """Show the gate on the bundled simulator: a pass at q=2,3,4, then a leaked approximate verifier caught.

    Needs no GPU. Exits 0 only when the pass passes and the failure is caught.
    """
    from ds4ci.commands.demo import run_demo

    _exit_with(lambda: run_demo(keep))


@app.command()
def selftest(
    device: Annotated[str, typer.Option(help="Reference server --target-device: cuda:N, hip:N or cpu.")] = "cuda:0",
    runner: Annotated[str | None, typer.Option(help="Runner name. Default: selftest-<host name>.")] = None,
    publish_dry_run: Annotated[
        bool, typer.Option("--publish-dry-run", help="Also show what ds4ci publish would post (nothing is sent).")
    ] = False,
    workdir: Annotated[
        Path | None, typer.Option(help="New or empty directory for models, evidence and results. Default: a temp dir.")
    ] = None,
    dtype: Annotated[str, typer.Option(help="Reference server dtype: bfloat16, float16 or float32.")] = "bfloat16",
    prompts: Annotated[int, typer.Option(help="Prompts per gate run (1-8).")] = 4,
    max_tokens: Annotated[int, typer.Option(help="Tokens per request.")] = 96,
    widths: Annotated[str, typer.Option(help="Comma-separated draft widths.")] = "2,3,4",
) -> None:
    """Run the real gate twice against the PyTorch reference server (needs torch: ds4ci[selftest]).

    Reference-exact speculation must pass; the approximate verifier leaked into the speculative
    arm must be caught at a first differing position. Exits 0 only when both happen.
    """
    from ds4ci.commands.selftest import run_selftest

    _exit_with(lambda: run_selftest(device=device, runner=runner, publish_dry_run=publish_dry_run, workdir=workdir,
                                    dtype=dtype, prompts=prompts, max_tokens=max_tokens, widths=widths))


@app.command()
def report(
    results: Annotated[list[Path], typer.Argument(help="One results.json per runner.")],
    format: Annotated[
        str, typer.Option("--format", help="comment (PR comment, <= 60,000 bytes) or summary (job summary).")
    ] = "comment",
    template_dir: Annotated[Path | None, typer.Option(help="Directory of Jinja2 templates overriding the bundled ones.")] = None,
    output: Annotated[Path | None, typer.Option(help="Write here instead of standard output.")] = None,
    run_url: Annotated[str | None, typer.Option(help="Link to the workflow run, shown in the footer.")] = None,
) -> None:
    """Render one or more runners' results.json as Markdown (escaped, size-bounded)."""
    from ds4ci.commands.report import run_report

    _exit_with(lambda: run_report(results, fmt=format, template_dir=template_dir, output=output, run_url=run_url))


@app.command()
def publish(
    results: Annotated[
        list[Path] | None,
        typer.Argument(
            help="One evidence bundle per runner (promoted attempt directory or the gate's --bundle-out .tar.gz), "
            "or a results.json whose bundle is at its recorded evidence location. Every bundle is verified first."
        ),
    ] = None,
    repo: Annotated[str | None, typer.Option(help="OWNER/NAME of the repository.")] = None,
    pr: Annotated[int | None, typer.Option(help="Pull request number: sticky comment + statuses on its head.")] = None,
    sha: Annotated[str | None, typer.Option(help="Full 40-hex commit SHA to set statuses on.")] = None,
    api_url: Annotated[
        str | None, typer.Option(help="GitHub API base URL. Default: $GITHUB_API_URL or https://api.github.com.")
    ] = None,
    target_url: Annotated[str | None, typer.Option(help="Link for the statuses (the workflow run).")] = None,
    token_env: Annotated[str, typer.Option(help="Name of the environment variable holding the token.")] = "GITHUB_TOKEN",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the comment and statuses; send nothing.")] = False,
    no_comment: Annotated[bool, typer.Option("--no-comment", help="Do not create or edit the sticky comment.")] = False,
    no_status: Annotated[bool, typer.Option("--no-status", help="Do not set commit statuses.")] = False,
    pending: Annotated[
        bool, typer.Option("--pending", help="Post a pending ds4ci/<runner> status (job start); needs --runner and --sha.")
    ] = False,
    runner: Annotated[str | None, typer.Option(help="Runner name for --pending.")] = None,
    template_dir: Annotated[Path | None, typer.Option(help="Directory of Jinja2 templates overriding the bundled ones.")] = None,
    summary_file: Annotated[
        Path | None,
        typer.Option(help="Where the job summary goes. Default: $GITHUB_STEP_SUMMARY when set."),
    ] = None,
    unverified: Annotated[
        bool,
        typer.Option(
            "--unverified", help="Accept a results.json without its bundle: comment labelled unverified, never a status."
        ),
    ] = False,
    comment_author: Annotated[
        str | None,
        typer.Option(
            help="Login the token comments as, for app installation tokens that cannot read /user "
            "(e.g. my-app[bot]). Default under Actions: github-actions[bot]."
        ),
    ] = None,
    allow_focused_reruns: Annotated[
        bool,
        typer.Option(
            "--allow-focused-reruns",
            help="Let a focused rerun (fewer widths than configured) pass on top of a full pass on an ancestor. "
            "Default: a focused pass stays pending ('full run required').",
        ),
    ] = False,
    expect_runner: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="A runner that should have reported; if it has no result here (busy or offline), the comment "
            "says what it last validated, what changed since and which run is still required. Repeatable.",
        ),
    ] = None,
    merge_config: Annotated[
        Path | None,
        typer.Option(
            help="ds4ci.toml whose [merge] table names the required runners, checks and approvals: the comment "
            "then shows the 'Review and merge status' checklist of `ds4ci merge-check` (needs --pr)."
        ),
    ] = None,
) -> None:
    """Post the sticky PR comment and one commit status per runner (context ds4ci/<runner>).

    Statuses rest on `ds4ci verify`'s recomputation from each evidence bundle, never on results.json
    alone: a bundle that does not verify is published as error. Only a passing, verified result for
    exactly the commit being set can ever become a green status.
    """
    from ds4ci.commands.publish import PublishRequest, run_publish

    request = PublishRequest(
        repo=repo, pr=pr, sha=sha, api_url=api_url, target_url=target_url, token_env=token_env, dry_run=dry_run,
        no_comment=no_comment, no_status=no_status, template_dir=template_dir, summary_file=summary_file,
        comment_author=comment_author, allow_focused=allow_focused_reruns, merge_config=merge_config,
        expect_runners=tuple(expect_runner or ()),
    )
    _exit_with(
        lambda: run_publish(results or [], request, pending=pending, runner=runner, unverified=unverified)
    )


@app.command()
def preflight(
    config: Annotated[Path | None, typer.Option(help="ds4ci.toml: model files and stale override files to check.")] = None,
    runner: Annotated[str | None, typer.Option(help="Runner name recorded with the fingerprint.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the fingerprint and checks as JSON.")] = False,
    deadline: Annotated[float, typer.Option(help="Hard deadline in seconds for the GPU health probe.")] = 20.0,
    busy_wait: Annotated[
        float | None,
        typer.Option(help="Seconds to wait for a GPU busy with another process to become free. "
                     "Default: preflight.busy_wait of --config, else 0."),
    ] = None,
) -> None:
    """Check that this runner is ready (GPU answers, files present, no stale overrides) and fingerprint it.

    A probe stuck in uninterruptible sleep cannot hold the job: the deadline is enforced here.
    A GPU used by a process that is not ds4ci's makes the runner busy (JSON key "busy").
    Exit 0 ready, 3 not ready or busy.
    """
    from ds4ci.commands.preflight import run_preflight

    _exit_with(
        lambda: run_preflight(config=config, runner=runner, as_json=json_out, deadline_s=deadline, busy_wait_s=busy_wait)
    )


@app.command()
def revisions(
    repo_dir: Annotated[Path, typer.Option(help="Git checkout to describe.")] = Path(),
    head_ref: Annotated[str, typer.Option(help="The revision under test.")] = "HEAD",
    base_ref: Annotated[str | None, typer.Option(help="The PR's base branch ref, e.g. origin/main.")] = None,
    upstream_ref: Annotated[str | None, typer.Option(help="Upstream main ref, e.g. upstream/main.")] = None,
) -> None:
    """Print head, base, upstream, merge base and a synthetic merge analysis as JSON."""
    from ds4ci.commands.revisions import run_revisions

    _exit_with(lambda: run_revisions(repo_dir=repo_dir, head_ref=head_ref, base_ref=base_ref, upstream_ref=upstream_ref))


@app.command("dispatch-check")
def dispatch_check(
    pr: Annotated[str, typer.Option(help="Pull request number (required for workflow_dispatch).")] = "",
    head_sha: Annotated[
        str, typer.Option(help="Full 40-hex head SHA the maintainer reviewed; the run is refused if the PR moved.")
    ] = "",
    widths: Annotated[str, typer.Option(help="Comma-separated widths, e.g. 2,3,4; empty: those of ds4ci.toml.")] = "",
    runners: Annotated[str, typer.Option(help="'all' or comma-separated runner names, e.g. gfx1151,sm86.")] = "all",
    runner_table: Annotated[
        str | None,
        typer.Option(help='JSON list of {"name", "labels", "gpu"} replacing the built-in gfx1151/sm86 runners.'),
    ] = None,
    repo: Annotated[str | None, typer.Option(help="OWNER/NAME. Default: $GITHUB_REPOSITORY.")] = None,
    api_url: Annotated[
        str | None, typer.Option(help="GitHub API base URL. Default: $GITHUB_API_URL or https://api.github.com.")
    ] = None,
    token_env: Annotated[str, typer.Option(help="Name of the environment variable holding the token.")] = "GITHUB_TOKEN",
    event_name: Annotated[str | None, typer.Option(help="Triggering event. Default: $GITHUB_EVENT_NAME.")] = None,
    github_output: Annotated[
        Path | None, typer.Option(help="Append the plan as step outputs here. Default: $GITHUB_OUTPUT when set.")
    ] = None,
) -> None:
    """Validate a gate run's inputs against its event; verify a pinned PR head; print the run plan.

    Exit 0 with outputs pr, head-sha, widths, runners, matrix, fork; 2 on bad input or a moved head;
    3 when GitHub could not be asked.
    """
    from ds4ci.commands.dispatch import run_dispatch_check

    _exit_with(
        lambda: run_dispatch_check(
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
        )
    )


@app.command("merge-check")
def merge_check(
    pr: Annotated[int, typer.Option(help="Pull request number.")],
    repo: Annotated[str | None, typer.Option(help="OWNER/NAME. Default: $GITHUB_REPOSITORY.")] = None,
    api_url: Annotated[
        str | None, typer.Option(help="GitHub API base URL. Default: $GITHUB_API_URL or https://api.github.com.")
    ] = None,
    runner: Annotated[
        list[str] | None,
        typer.Option(metavar="NAME", help="Gate runner whose ds4ci/NAME status must be success; repeat for several."),
    ] = None,
    check: Annotated[
        list[str] | None,
        typer.Option(metavar="NAME", help="Check run name or commit status context that must succeed; repeatable."),
    ] = None,
    approvals: Annotated[
        int | None, typer.Option(help="Approving reviews required on the head (default 1, or merge.approvals).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the conditions as JSON.")] = False,
    config: Annotated[Path | None, typer.Option(help="ds4ci.toml whose [merge] table gives runners, checks, approvals.")] = None,
) -> None:
    """Is the pull request ready to merge on its exact current head?

    Ready only when every gate runner and named check is green on the head, enough approvals are
    on the head, no changes are requested, no review thread is unresolved, and the PR is open,
    not a draft and mergeable. Token from $GITHUB_TOKEN. Exit 0 ready, 1 not ready (one line per
    unmet condition), 2 usage error, 3 GitHub error.
    """
    from ds4ci.commands.merge_check import run_merge_check

    _exit_with(
        lambda: run_merge_check(
            pr=pr, repo=repo, api_url=api_url, runners=runner, checks=check, approvals=approvals,
            as_json=json_out, config=config,
        )
    )


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("ds4ci: interrupted", err=True)
        sys.exit(EXIT_ERROR)
