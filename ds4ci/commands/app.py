"""The ``ds4ci`` Typer app: options in, one library call, exit code out (``ds4ci.cli`` starts it).

Heavy libraries (PyGithub, Jinja2, requests, jsonschema) are imported inside the commands
that need them, so ``ds4ci --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ds4ci import __version__
from ds4ci.commands import app_calibrate, app_gate, app_github, app_rehearse, app_setup, helptext
from ds4ci.commands.finish import exit_with
from ds4ci.commands.flags import table_flags
from ds4ci.commands.service import service_app
from ds4ci.errors import EXIT_ERROR
from ds4ci.options import table

helptext.install()
_DEFAULT_WIDTHS = ",".join(str(q) for q in table.DEFAULT_WIDTHS)
app = typer.Typer(
    name="ds4ci",
    help=(
        "DS4 reference-exact speculative-decoding parity gate.\n\n"
        "Runs the inference server as plain greedy (target-only) decoding and with reference-exact "
        "speculative decoding at several draft widths, proves the token IDs are identical and that "
        "speculation really ran, with drafts rejected, keeps the evidence, and reports to pull requests.\n\n"
        "Exit codes: 0 pass, 1 fail (contract violated), 2 usage or configuration error, "
        "3 error (no verdict could be reached); every command's, in docs/exit-codes.md."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


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


app.command("gate")(app_gate.gate)
app.command("bisect")(app_gate.bisect)
app.command("calibrate")(app_calibrate.calibrate)
app.command("init")(app_setup.init)
app.command("upgrade")(app_setup.upgrade)
app.command("pin")(app_setup.pin)
app.add_typer(app_setup.config_app, name="config")


@app.command()
def verify(
    bundles: Annotated[
        list[Path], typer.Argument(metavar="BUNDLE...",
                                   help="Evidence bundles: promoted attempt directories or .tar.gz archives of them; "
                                   "or calibration records (ds4ci calibrate's OUT/record).")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the recomputed documents as JSON.")] = False,
    expect_config: Annotated[
        Path | None,
        typer.Option(
            help="Trusted ds4ci.toml (e.g. the base branch's): its widths, max_tokens, seed, repeats and pins "
            "must be what each bundle ran."
        ),
    ] = None,
    key: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY", help="A runner's public key line (ed25519:..., as `ds4ci runner-key init` prints it): each "
                     "bundle must carry an attestation.json it signed. Repeatable. Keys named in --expect-config "
                     "([runners.<name>] public_key) are checked too."),
    ] = None,
    max_extract_mib: Annotated[
        int,
        typer.Option(help="Extraction budget for a .tar.gz bundle: its files together, in MiB. The archive's own "
                     "manifest never raises it; a bundle over it does not verify (exit 3)."),
    ] = 512,
) -> None:
    """Re-derive each bundle's verdict from its raw evidence; trust nothing in results.json.

    Checks every file against manifest.json (and, with --key or keys in --expect-config, the runner's
    signature in attestation.json), then derives the whole results.json again from the sealed files
    with the gate's own code (every log re-parsed, every answer and verdict judged) and compares it
    with the bundle's, naming the first key path that differs.
    Give the bundle directory (runs/<id> or failed/<id> under --evidence-dir) or the .tar.gz from
    gate --bundle-out; a results.json alone is not a bundle.
    A calibration record (`ds4ci calibrate`'s OUT/record) is verified the same way: its files against its
    manifest, its calibration.json derived again from every gate's own bundle, its signature with --key.

    A bundle sealed by an older ds4ci (an older evidence schema, docs/results.md) is re-derived with
    today's rules: its files and copied fields must still match, and the note says whether the
    verdicts agree ("sealed by ds4ci A (schema N); re-derived by ds4ci B (schema M)"); a difference
    is a finding, not tampering, and the exit code is the re-derived verdict's.

    Exit codes: 0: every bundle intact, consistent and passing; 1: intact and consistent, some failing;
    4: intact and consistent, but the gate reached no verdict (verdict error); 3: does not verify:
    tampered, unreadable or not a bundle (the message says what); 5: intact, but of an evidence schema
    this ds4ci cannot read (the message names the install line, from ds4ci's tag vVERSION, of the ds4ci that can); 2: a path that
    does not exist, or a bad flag. With several bundles the most severe code wins, in the order 3, 5, 4, 1, 0.
    """
    from ds4ci.commands.verify import run_verify

    exit_with(lambda: run_verify(bundles, as_json=json_out, expect_config=expect_config, keys=key or [],
                                 max_extract_mib=max_extract_mib))


hash_cache_app = typer.Typer(
    help="The SHA-256 cache the gate may use for big model files (see docs/identity.md). "
    "Exit codes (hash-cache add): 0 recorded, 2 a file or the cache cannot be read or written, 3 a file changed "
    "while it was read.",
    no_args_is_help=True,
)
app.add_typer(hash_cache_app, name="hash-cache")


@hash_cache_app.command("add")
def hash_cache_add(
    files: Annotated[list[Path], typer.Argument(metavar="FILE...",
                                                help="Files to hash and record (e.g. the pinned model files).")],
    cache: Annotated[
        Path | None,
        typer.Option(help="Cache file to fill; the gate reads it through hash_cache_path. Default: the user's cache."),
    ] = None,
) -> None:
    """Hash files and record them in a hash cache, e.g. a root-owned one the gate reads but PR code cannot write.

    Exit codes: 0 recorded, 2 a file or the cache cannot be read or written, 3 a file changed while it was read.
    """
    from ds4ci.commands.hashcache import run_hash_cache_add

    exit_with(lambda: run_hash_cache_add(files, cache))


runner_key_app = typer.Typer(
    help="This runner's Ed25519 key: it signs each bundle's attestation.json (see docs/security.md). "
    "Exit codes (runner-key init): 0 written, 2 refused (the key file exists or cannot be written).",
    no_args_is_help=True,
)
app.add_typer(runner_key_app, name="runner-key")


@runner_key_app.command("init")
def runner_key_init(
    path: Annotated[
        Path | None,
        typer.Option(help="Where to write the private key (mode 0600; never overwritten). "
                     "Default: $XDG_CONFIG_HOME/ds4ci/runner-key.pem, else ~/.config/ds4ci/runner-key.pem."),
    ] = None,
) -> None:
    """Make this runner's key pair; print the public key line for the trusted ds4ci.toml.

    Run once per runner, as the user the gate runs as. Put the printed line under
    [runners.<name>] public_key in the base branch's ds4ci.toml; verify and publish then refuse
    bundles this key did not sign. The sandbox never shows the key's folder to PR code.

    Exit codes: 0 written, 2 refused (the key file exists, never overwritten, or cannot be written).
    """
    from ds4ci.commands.runnerkey import run_runner_key_init

    exit_with(lambda: run_runner_key_init(path))


@app.command()
def demo(
    keep: Annotated[
        Path | None, typer.Option(help="Keep the demo workspace (models, evidence, results) in this new directory.")
    ] = None,
) -> None:
    """Show the gate on the bundled simulator: a pass at q=2,3,4, then a leaked approximate verifier caught.

    Needs no GPU. Exit codes: 0 when the pass passes and the failure is caught, 1 when either does not
    happen, 2 usage (--keep exists), 3 internal error.
    """
    from ds4ci.commands.demo import run_demo

    exit_with(lambda: run_demo(keep))


@app.command()
def selftest(
    device: Annotated[str, typer.Option(metavar="DEVICE",
                                        help="Reference server --target-device: cuda:N, hip:N or cpu.")] = "cuda:0",
    runner: Annotated[str | None, typer.Option(metavar="NAME", help="Runner name. Default: selftest-<host name>.")] = None,
    publish_dry_run: Annotated[
        bool, typer.Option("--publish-dry-run", help="Also show what ds4ci publish would post (nothing is sent).")
    ] = False,
    workdir: Annotated[
        Path | None, typer.Option(help="New or empty directory for models, evidence and results. Default: a temp dir.")
    ] = None,
    dtype: Annotated[str, typer.Option(metavar="DTYPE",
                                       help="Reference server dtype: bfloat16, float16 or float32.")] = "bfloat16",
    prompts: Annotated[int, typer.Option(help="Prompts per gate run (1-8).")] = 4,
    max_tokens: Annotated[int, typer.Option(help="Tokens per request.")] = table.get("gate", "max_tokens").default,
    widths: Annotated[str, typer.Option(metavar="Q,Q", help="Comma-separated draft widths.")] = _DEFAULT_WIDTHS,
    server_bin: Annotated[
        Path | None,
        typer.Option(help="Instead: run the tiny DS4 models (ds4ci tiny-models) through this real dflash_server build "
                          "and report the gate's verdict, each server's times, and whether speculation answered what "
                          "target-only answered (needs gguf: ds4ci[tiny]; exit code: the gate's)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="With --server-bin: the tiny models' seed.")] = 1,
    kind: Annotated[str, typer.Option(metavar="KIND",
                                      help="With --server-bin: the tiny models' kind, as `ds4ci tiny-models --kind` "
                                           "(successor, whose config requires proof coverage; random).")] = "successor",
) -> None:
    """Run the real gate twice against the PyTorch reference server (needs PyTorch: pip install torch).

    Reference-exact speculation must pass; the approximate verifier leaked into the speculative
    arm must be caught at a first differing position. Exit codes: 0 when both happen, 1 when one does not,
    2 usage, 3 no verdict (PyTorch missing, or a gate run reached none).
    With --server-bin PATH: check a real build and this runner with the tiny models instead (exit code: the gate's).
    """
    if server_bin is not None:
        from ds4ci.commands.selftest_real import run_real_selftest

        exit_with(lambda: run_real_selftest(server_bin, workdir, runner, seed, kind))
    from ds4ci.commands.selftest import run_selftest

    exit_with(lambda: run_selftest(device=device, runner=runner, publish_dry_run=publish_dry_run, workdir=workdir,
                                    dtype=dtype, prompts=prompts, max_tokens=max_tokens, widths=widths))


@app.command("tiny-models")
def tiny_models(
    folder: Annotated[Path, typer.Argument(help="Directory to write into (created if missing).")],
    seed: Annotated[int, typer.Option(help="Seed of every weight and prompt: the same seed gives identical files.")] = 1,
    kind: Annotated[str, typer.Option(help="successor: the target walks a long cycle of words that the draft "
                                           "partly knows (partial acceptance, rejections at every slot); random: "
                                           "the first random-weight models.")] = "successor",
    design: Annotated[str | None, typer.Option(help="The successor models' design by name (ds4ci/tinymodels/design.py "
                                                    "BY_NAME: FIFTH_LOUD_ALIGNED, FOURTH, FIFTH_LOUD, ...); "
                                                    "default: the shipped one, FIFTH_LOUD_ALIGNED.")] = None,
) -> None:
    """Write tiny DS4 target and DSpark draft GGUF files, prompts and a pinned ds4ci.toml.

    The shapes are ones the real dflash_server's CUDA kernels accept; every generated token decodes
    to one ASCII word (" w417"), so answers spell their token IDs. Needs gguf: pip install 'ds4ci[tiny]'.
    Then: ds4ci gate --config DIR/ds4ci.toml --server-bin PATH, or ds4ci selftest --server-bin PATH.
    Exit codes: 0 written, 2 usage (a bad seed or folder, or gguf not installed).
    """
    from ds4ci.commands.tiny_models import run_tiny_models

    exit_with(lambda: run_tiny_models(folder, seed, kind, design))


@app.command()
def report(
    results: Annotated[
        list[Path],
        typer.Argument(metavar="RESULTS...", help="One results.json per runner, or its evidence bundle (the attempt "
                       "directory or the gate's --bundle-out .tar.gz)."),
    ],
    format: Annotated[
        str, typer.Option("--format", metavar="comment|summary|junit",
                          help="comment (PR comment, <= 60,000 bytes), summary (job summary) or junit (JUnit XML: "
                          "one testsuite per runner, one testcase per width and prompt).")
    ] = "comment",
    template_dir: Annotated[Path | None, typer.Option(help="Directory of Jinja2 templates overriding the bundled ones.")] = None,
    output: Annotated[Path | None, typer.Option(help="Write here instead of standard output.")] = None,
    run_url: Annotated[str | None, typer.Option(metavar="URL", help="Link to the workflow run, shown in the footer.")] = None,
    bisect: Annotated[Path | None, typer.Option(metavar="PATH", help="A `ds4ci bisect --json` result: rendered as a "
                                                "section of its own (with every step in a summary).")] = None,
    calibrations: Annotated[Path | None, typer.Option(
        metavar="DIR", help="The runners' calibration records (`ds4ci calibrate --out`, or a folder of them): each gate "
        "runner's section cites the latest that matches its runner and tiny models, or says it was never calibrated."),
    ] = None,
) -> None:
    """Render one or more runners' results.json as Markdown (escaped, size-bounded).

    Exit codes: 0 written, 2 a results file (or the --bisect result) is missing, invalid or duplicated (nothing
    is written).
    """
    from ds4ci.commands.report import run_report

    exit_with(lambda: run_report(results, fmt=format, template_dir=template_dir, output=output, run_url=run_url,
                                 bisect=bisect, calibrations=calibrations))


app.command("publish")(app_github.publish)


@app.command()
@table_flags("preflight")
def preflight(
    config: Annotated[Path | None, typer.Option(help="ds4ci.toml: model files and stale override files to check. "
                                                "Default: ./ds4ci.toml when it exists (as for every command).")] = None,
    runner: Annotated[str | None, typer.Option(metavar="NAME", help="Runner name recorded with the fingerprint.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the fingerprint and checks as JSON.")] = False,
    config_base: Annotated[Path | None, typer.Option(metavar="DIR", help="The folder the config's relative paths are "
                                                     "read from (default: the config file's own folder), as for "
                                                     "`ds4ci gate --config-base`.")] = None,
    deadline: Annotated[float, typer.Option(help="Hard deadline in seconds for the GPU health probe.")] = 20.0,
    **settings: Any,
) -> None:
    """Check that this runner is ready (GPU answers, files present and matching their pins, no stale overrides)
    and fingerprint it.

    Every pinned file is hashed (through the hash cache where the config trusts it), so "ready" means
    the gate will find the files it pins. A probe stuck in uninterruptible sleep cannot hold the job:
    the deadline is enforced here. A GPU used by a process that is not ds4ci's makes the runner busy
    (JSON key "busy"). Exit codes: 0 ready, 2 usage or an invalid config file (a TODO pin included),
    3 not ready or busy (each problem is listed).
    """
    from ds4ci.commands.preflight import run_preflight

    busy_wait = table.overrides("preflight", settings)["busy_wait"]

    exit_with(
        lambda: run_preflight(config=config, runner=runner, as_json=json_out, deadline_s=deadline, busy_wait_s=busy_wait,
                              config_base=config_base)
    )


@app.command()
def revisions(
    repo_dir: Annotated[Path, typer.Option(help="Git checkout to describe.")] = Path(),
    head_ref: Annotated[str, typer.Option(metavar="REF", help="The revision under test.")] = "HEAD",
    base_ref: Annotated[str | None, typer.Option(metavar="REF", help="The PR's base branch ref, e.g. origin/main.")] = None,
    upstream_ref: Annotated[str | None, typer.Option(metavar="REF", help="Upstream main ref, e.g. upstream/main.")] = None,
) -> None:
    """Print head, base, upstream, merge base and a synthetic merge analysis as JSON.

    Exit codes: 0 printed, 2 not a git checkout or a ref that does not name a commit, 3 git failed.
    """
    from ds4ci.commands.revisions import run_revisions

    exit_with(lambda: run_revisions(repo_dir=repo_dir, head_ref=head_ref, base_ref=base_ref, upstream_ref=upstream_ref))


app.command("rehearse")(app_rehearse.rehearse)
app.command("dispatch-check")(app_github.dispatch_check)
app.command("merge-check")(app_github.merge_check)
app.add_typer(service_app, name="service")


def _point_to_exit_codes(typers: list[typer.Typer]) -> None:
    """Each command's --help ends by pointing at the one table of every command's exit codes."""
    from ds4ci.commands.exitcodes import epilog

    for group in typers:
        for info in group.registered_commands:
            info.epilog = epilog()
        _point_to_exit_codes([g.typer_instance for g in group.registered_groups if g.typer_instance is not None])


_point_to_exit_codes([app])


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("ds4ci: interrupted", err=True)
        sys.exit(EXIT_ERROR)
