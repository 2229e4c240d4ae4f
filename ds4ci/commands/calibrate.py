"""``ds4ci calibrate``: this runner's gate against the catalogue's planted faults; the sealed, signed record.

The build comes from ``--build BUILD`` (a configured CMake build folder; the source folder is the one its
CMakeCache.txt names; ``cmake --build BUILD --target dflash_server``) or from ``--engine-config``'s
``[build]`` (its command, cwd and server_bin; the source folder is ``--source``, else the build's cwd).
``--restore`` puts back a file an interrupted run left changed (``OUT/applied.json``), then stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ds4ci.calibrate.build import BuildPlan, cmake_plan
from ds4ci.calibrate.catalogue import choose, default_catalogue, load_catalogue
from ds4ci.calibrate.run import Calibration, calibrate
from ds4ci.calibrate.workspace import Workspace, source_dir
from ds4ci.errors import UsageError
from ds4ci.options.sections import build as build_section
from ds4ci.options.values import read_toml


@dataclass(frozen=True)
class CalibrateArgs:
    out: Path
    build: Path | None = None
    engine_config: Path | None = None
    source: Path | None = None
    target: str = "dflash_server"
    models: Path | None = None
    runner: str | None = None
    catalogue: Path | None = None
    only: str = ""
    signing_key: Path | None = None
    restore: bool = False
    gate_args: tuple[str, ...] = ()
    jobs: int = 1
    cpu_sets: str = "none"
    mutant_repeats: int | None = None


def say(text: str) -> None:
    print(f"[calibrate] {text}", flush=True)


def _plan(args: CalibrateArgs) -> tuple[BuildPlan, Path]:
    """The build plan and the engine's source folder."""
    if (args.build is None) == (args.engine_config is None):
        raise UsageError("give --build BUILD (a configured CMake build folder) or --engine-config FILE (its [build] "
                         "table), exactly one")
    if args.build is not None:
        return cmake_plan(args.build.resolve(), args.target), source_dir(args.build, args.source)
    assert args.engine_config is not None
    spec = build_section(read_toml(args.engine_config).get("build"), args.engine_config.resolve().parent)
    if spec is None:
        raise UsageError(f"--engine-config {args.engine_config}: expected a [build] table with command and server_bin")
    cwd = spec.cwd or args.engine_config.resolve().parent
    plan = BuildPlan(spec.command, cwd, spec.server_bin, None, spec.server_bin.name, spec.timeout_s)
    return plan, (args.source or cwd).resolve()


def _signing_key(given: Path | None) -> Path | None:
    from ds4ci.evidence import keys

    path = given if given is not None else keys.default_path()
    if given is None and not path.exists():
        return None
    keys.load_private(path)  # a bad key is refused before anything is built
    return path


def run_calibrate(args: CalibrateArgs) -> int:
    plan, source = _plan(args)
    if args.restore:
        restored = Workspace(source, args.out).restore()
        say(f"restored the file mutant {restored} changed" if restored else f"nothing to restore in {args.out}")
        return 0
    if args.models is None or args.runner is None:
        raise UsageError("give --models MODELS (a `ds4ci tiny-models` folder) and --runner NAME (the name this "
                         "runner's gate reports as)")
    catalogue = load_catalogue(args.catalogue or default_catalogue())
    chosen = choose(catalogue, args.only)
    job = Calibration(plan, source, args.models.resolve(), args.runner, args.out.resolve(),
                      _signing_key(args.signing_key), args.gate_args, args.jobs, args.cpu_sets,
                      args.mutant_repeats)
    return calibrate(job, catalogue, chosen, say)
