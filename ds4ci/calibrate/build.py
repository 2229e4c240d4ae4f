"""How the engine is rebuilt after each change: ``cmake --build BUILD --target dflash_server``, or a config's [build].

The build runs as the maintainer who calibrates (their own checkout and build folder), with its output
appended to ``OUT/build.log``; only the changed file recompiles. The binary is then copied out (each gate
runs on its own copy) and its SHA-256 kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ds4ci.errors import NoVerdictError, UsageError

DEFAULT_TARGET = "dflash_server"
DEFAULT_TIMEOUT_S = 4 * 3600.0


class BuildFailed(NoVerdictError):
    """The build exited non-zero or ran past its time: the message says which and where its log is."""


@dataclass(frozen=True)
class BuildPlan:
    command: tuple[str, ...] | str  # argv, or a shell command line (a config's [build] command)
    cwd: Path | None
    binary: Path | None  # None: the CMake target's executable in the build folder
    build_dir: Path | None
    target: str = DEFAULT_TARGET
    timeout_s: float = DEFAULT_TIMEOUT_S

    def describe(self) -> str:
        return self.command if isinstance(self.command, str) else " ".join(self.command)


def cmake_plan(build_dir: Path, target: str) -> BuildPlan:
    return BuildPlan(("cmake", "--build", str(build_dir), "--target", target), None, None, build_dir, target)


def build(plan: BuildPlan, log: Path) -> float:
    """Run the build once; its seconds. BuildFailed when it does not succeed."""
    t0 = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        try:
            proc = subprocess.run(plan.command, shell=isinstance(plan.command, str), cwd=plan.cwd, stdout=fh,
                                  stderr=subprocess.STDOUT, check=False, timeout=plan.timeout_s)
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"`{plan.describe()}` ran past {plan.timeout_s:g} s; see {log}") from None
        except OSError as exc:
            raise BuildFailed(f"`{plan.describe()}` could not start ({exc.strerror or exc})") from None
    if proc.returncode != 0:
        raise BuildFailed(f"`{plan.describe()}` exited {proc.returncode}; see {log}")
    return time.perf_counter() - t0


def built_binary(plan: BuildPlan) -> Path:
    if plan.binary is not None:
        candidates = [plan.binary]
    else:
        assert plan.build_dir is not None
        candidates = [plan.build_dir / plan.target, plan.build_dir / "bin" / plan.target]
    found = [p for p in candidates if p.is_file() and os.access(p, os.X_OK)]
    if len(found) != 1:
        where = " or ".join(str(p) for p in candidates)
        raise BuildFailed(f"expected one executable at {where} after the build, found {len(found)}")
    return found[0]


def keep_binary(plan: BuildPlan, dest: Path) -> str:
    """Copy the built binary to ``dest`` (whole, never half a copy); its SHA-256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    shutil.copy2(built_binary(plan), partial)
    partial.rename(dest)
    digest = hashlib.sha256()
    with dest.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def require_models(models: Path) -> Path:
    config = models / "ds4ci.toml"
    if not config.is_file():
        raise UsageError(f"--models {models}: expected a folder with the ds4ci.toml that `ds4ci tiny-models` writes")
    return config
