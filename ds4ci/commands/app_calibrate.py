"""Typer wiring of ``ds4ci calibrate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ds4ci.commands.finish import exit_with


def calibrate(
    out: Annotated[Path, typer.Option(
        metavar="DIR", help="A new folder: kept binaries, each gate's evidence, and the sealed record (OUT/record). "
        "With --restore: the interrupted run's folder.")],
    build: Annotated[Path | None, typer.Option(
        metavar="DIR", help="The engine's configured CMake build folder (its CMakeCache.txt names the source "
        "folder); built with `cmake --build BUILD --target TARGET`.")] = None,
    engine_config: Annotated[Path | None, typer.Option(
        metavar="FILE", help="Instead of --build: a ds4ci.toml whose [build] table (command, cwd, server_bin) "
        "builds the engine.")] = None,
    source: Annotated[Path | None, typer.Option(
        metavar="DIR", help="The engine's source folder (default: from CMakeCache.txt, checked if given; with "
        "--engine-config: the build's cwd).")] = None,
    target: Annotated[str, typer.Option(
        metavar="NAME", help="With --build: the CMake target and binary name.")] = "dflash_server",
    models: Annotated[Path | None, typer.Option(
        metavar="DIR", help="The tiny models' folder (`ds4ci tiny-models`): every gate runs with its ds4ci.toml.")] = None,
    runner: Annotated[str | None, typer.Option(
        metavar="NAME", help="This runner's name, as its gate reports it (the report cites a calibration of the "
        "same runner).")] = None,
    catalogue: Annotated[Path | None, typer.Option(
        metavar="FILE", help="The catalogue of planted faults. Default: the one ds4ci ships "
        "(lucebox-ds4-reference-exact.toml).")] = None,
    only: Annotated[str, typer.Option(metavar="NAMES", help="Comma-separated mutant names (default: all).")] = "",
    signing_key: Annotated[Path | None, typer.Option(
        metavar="FILE", help="The runner's private key that signs the record. Default: the runner-key default path "
        "when that file exists.")] = None,
    restore: Annotated[bool, typer.Option("--restore", help="Put back the file an interrupted run left changed "
                                                            "(OUT/applied.json), then stop.")] = False,
    gate_arg: Annotated[list[str] | None, typer.Option(
        metavar="ARG", help="One more argument for every `ds4ci gate` (repeatable).")] = None,
    jobs: Annotated[int, typer.Option(metavar="N", help="Mutants' gates side by side, each started once its binary "
                                      "is built; the unchanged build's gate runs first, alone.")] = 1,
    cpu_sets: Annotated[str, typer.Option(metavar="LEVER", help="none (every gate on every CPU), affinity (the i-th "
        "gate running on the i-th of N disjoint CPU sets) or affinity+online (also listed as its servers' online "
        "CPUs in their sandbox); recorded per gate.")] = "none",
    mutant_repeats: Annotated[int | None, typer.Option(metavar="N", help="The mutants' gates with N repeats, fewer "
        "than the config's (the unchanged build keeps them): the record then counts a lower bound.")] = None,
) -> None:
    """Calibrate this runner: plant each catalogued fault in the engine, rebuild, gate, and record what was caught.

    Refuses a source tree with changes it did not make (git status) and a catalogue whose substitutions do not
    each find their text exactly once, before touching anything. The unchanged build is gated first; if it
    does not pass, no mutant runs and the calibration fails with that reason. The source is always put back,
    also on SIGINT or SIGTERM; after a crash, --restore. The record (OUT/record) is sealed, signed with the
    runner key, and `ds4ci verify OUT/record` derives it again from every gate's own evidence.

    Exit codes: 0 calibrated (record written); 1 the unchanged build did not pass (record written, saying
    so); 2 usage or a refusal (modified tree, catalogue that does not apply, a change still in flight);
    3 no calibration (a build failed for the unchanged source, an interrupt, an internal error).
    """
    from ds4ci.commands.calibrate import CalibrateArgs, run_calibrate

    args = CalibrateArgs(out, build, engine_config, source, target, models, runner, catalogue, only, signing_key,
                         restore, tuple(gate_arg or ()), jobs, cpu_sets,
                         mutant_repeats)
    exit_with(lambda: run_calibrate(args))
