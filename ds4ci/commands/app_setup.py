"""Typer wiring of the commands that set a repository up: ``init`` and ``config check``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ds4ci.commands.finish import exit_with

config_app = typer.Typer(
    help="Check a ds4ci.toml. Exit codes: 0 valid, 2 invalid (each problem is listed).", no_args_is_help=True
)


_REF_HELP = ("The ds4ci the workflows call (or, copied, install and whose action they use): OWNER/NAME@REF of "
             "ds4ci's repository, REF a tag (v0.1.0) or a full commit. Without it the workflows hold a placeholder "
             "that `ds4ci config check` and `ds4ci preflight` point out.")
_NoWorkflows = Annotated[bool, typer.Option("--no-workflows", help="Do not write .github/workflows/gate.yml (or the "
                                             "copies).")]
_CopyWorkflows = Annotated[bool, typer.Option("--copy-workflows", help="Write full copies of ds4ci's gate.yml and "
                                              "report.yml (about 600 lines) instead of the short gate.yml that calls "
                                              "ds4ci's own, pinned.")]
_FORCE_HELP = ("Overwrite ds4ci.toml and the workflows if they exist; refused when ds4ci.toml holds a key init did "
               "not write (each is named). To move the workflows to another ds4ci: `ds4ci upgrade`.")


def init(
    runner: Annotated[
        list[str] | None,
        typer.Option("--runner", metavar="NAME", help="A runner to configure ([runners.<name>]); repeat for several. Names like "
                     "gfx1151 or sm86 also set target_device and the gpu the runner must have."),
    ] = None,
    simulator: Annotated[
        bool, typer.Option("--simulator", help="Also write tiny model and prompt files for the bundled simulator "
                           "(ds4ci-sim/) and use it as the server: `ds4ci gate --config ds4ci.toml` then runs here, "
                           "without a GPU.")
    ] = False,
    build_command: Annotated[
        str | None,
        typer.Option("--build-command", metavar="CMD", help="The shell command that builds the server from the "
                     "checkout, written as [build].command. Default: from CMakePresets.json (its first configure "
                     "preset) or CMakeLists.txt (cmake -S . -B build, then cmake --build build --target "
                     "dflash_server)."),
    ] = None,
    server_bin: Annotated[Path | None, typer.Option(metavar="PATH", help="The server binary: with [build] the one "
                          "the build makes (default <build folder>/bin/dflash_server); with --prebuilt an existing one, "
                          "pinned when it is here.")] = None,
    prebuilt: Annotated[
        bool, typer.Option("--prebuilt", help="Write gate.server_bin (a binary built elsewhere, not from the pull "
                           "request) instead of [build]. Every pull request is then tested against that binary.")
    ] = False,
    target: Annotated[Path | None, typer.Option(help="Target model file; its SHA-256 is computed and pinned.")] = None,
    draft: Annotated[Path | None, typer.Option(help="Draft model file; its SHA-256 is computed and pinned.")] = None,
    prompt_file: Annotated[
        list[Path] | None, typer.Option("--prompt-file", metavar="PATH", help="Prompt file, pinned; repeat for several.")
    ] = None,
    directory: Annotated[Path, typer.Option("--dir", help="The repository root to write into.")] = Path(),
    no_workflows: _NoWorkflows = False,
    copy_workflows: _CopyWorkflows = False,
    force: Annotated[bool, typer.Option("--force", help=_FORCE_HELP)] = False,
    ds4ci_ref: Annotated[str | None, typer.Option("--ds4ci-ref", metavar="OWNER/NAME@REF", help=_REF_HELP)] = None,
) -> None:
    """Write a starter ds4ci.toml (pins computed from the files named), .gitignore entries for the evidence
    folder and its [build]'s output, and .github/workflows/gate.yml: about fifteen lines that call ds4ci's own
    gate workflow at --ds4ci-ref (workflow_call), or with --copy-workflows full copies of the workflows this
    ds4ci ships, set to run --ds4ci-ref's ds4ci.

    A file that is not on this machine (a model staged on the runner only) gets a TODO pin that
    `ds4ci config check` and `ds4ci preflight` explain. Nothing is overwritten without --force.

    Exit codes: 0 written, 2 refused (a file exists, a key init did not write, a tracked build folder, a bad
    name); nothing is written then.
    """
    from ds4ci.commands.init import InitRequest, run_init

    request = InitRequest(
        directory=directory, runners=list(runner or []), simulator=simulator, server_bin=server_bin, target=target,
        draft=draft, prompts=list(prompt_file or []), workflows=not no_workflows, copy_workflows=copy_workflows,
        force=force, ds4ci_ref=ds4ci_ref, build_command=build_command, prebuilt=prebuilt,
    )
    exit_with(lambda: run_init(request))


def upgrade(
    ds4ci_ref: Annotated[
        str,
        typer.Option("--ds4ci-ref", metavar="OWNER/NAME@REF", help="The ds4ci the workflows are to run: OWNER/NAME@REF "
                     "of ds4ci's repository, REF a tag (v0.2.0) or a full commit. Install that ds4ci first: the "
                     "workflows written are the ones it ships."),
    ],
    directory: Annotated[Path, typer.Option("--dir", help="The repository root whose workflows move.")] = Path(),
) -> None:
    """Move the workflows `ds4ci init` wrote (.github/workflows/gate.yml, report.yml) to another ds4ci: each is
    rewritten as this ds4ci ships it, its DS4CI_REF line set to --ds4ci-ref. ds4ci.toml is never touched:
    its runner tables, keys and [merge] stay byte for byte.

    Exit codes: 0 written, 2 refused (a bad ref, no workflows here); nothing is written then.
    """
    from ds4ci.commands.upgrade import run_upgrade

    exit_with(lambda: run_upgrade(directory, ds4ci_ref))


@config_app.command("check")
def config_check(
    config: Annotated[Path | None, typer.Option(help="The file to check. Default: ./ds4ci.toml.")] = None,
    runner: Annotated[
        str | None, typer.Option(metavar="NAME", help="Check for this runner only. Default: every [runners.<name>] in "
                                 "the file.")
    ] = None,
) -> None:
    """Validate a ds4ci.toml offline, as the gate would read it, without the model files.

    Checks types, unknown keys, [runners.<name>] tables, widths (an array: widths = [2, 3, 4]) and
    the form of every pin; `ds4ci preflight --config` checks the files themselves on the runner.

    Exit codes: 0 valid, 2 invalid (each problem is listed).
    """
    from ds4ci.commands.configcheck import run_config_check

    exit_with(lambda: run_config_check(config, runner))


@config_app.command("runners")
def config_runners(
    config: Annotated[Path | None, typer.Option(help="The file to read. Default: ./ds4ci.toml.")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="One line of JSON, as the gate workflow reads it (fromJSON) and "
                           "`ds4ci dispatch-check --runner-table` takes it.")
    ] = False,
) -> None:
    """Print the runner table the gate workflow's matrix is made of: each runner's name, labels and role.

    From the [runners.<name>] tables (else [runner] name); labels default to ["self-hosted", "<name>"].
    A runner added to the file is in the next run's matrix: the workflow needs no edit.

    Exit codes: 0 printed, 2 the file names no runner or a runner table is invalid.
    """
    from ds4ci.commands.configcheck import run_config_runners

    exit_with(lambda: run_config_runners(config, json_out))


def pin(
    config: Annotated[Path | None, typer.Option(metavar="PATH", help="The file whose pins to refresh. Default: "
                                                "./ds4ci.toml.")] = None,
) -> None:
    """Refresh the SHA-256 pins of a ds4ci.toml in place from the files on this machine (a TODO pin included).

    Only pin values change; comments, order, every other key and the workflows stay as they are (unlike
    `ds4ci init --force`). A file that is not here keeps its pin and is listed. Run it on the runner that has
    the models, then commit the file through review: the pins are the trusted config.

    Exit codes: 0 written (or nothing to change), 2 the file is missing or invalid, or a pin is not on one line
    (nothing is written then).
    """
    from ds4ci.commands.pin import run_pin

    exit_with(lambda: run_pin(config))
