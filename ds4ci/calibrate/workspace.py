"""The engine's source folder while mutants are applied: one at a time, always put back byte for byte.

``OUT/applied.json`` records a change in flight (the file, the mutant, the original's SHA-256) and
``OUT/originals/`` keeps the original bytes, so a run killed by SIGKILL or a crash leaves enough behind
for ``--restore``; SIGINT and SIGTERM restore at once (:func:`restoring_on_signals`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ds4ci.calibrate.catalogue import CatalogueError, Mutant, mutate
from ds4ci.errors import NoVerdictError, UsageError

STATE = "applied.json"
ORIGINALS = "originals"


def source_dir(build: Path, given: Path | None) -> Path:
    """The source folder a CMake build folder was configured from (its CMakeCache.txt); ``given`` must equal it."""
    cache = build / "CMakeCache.txt"
    try:
        lines = cache.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise UsageError(f"{build}: expected a configured CMake build folder with CMakeCache.txt ({exc})") from None
    home = [ln.split("=", 1)[1] for ln in lines if ln.startswith("CMAKE_HOME_DIRECTORY:")]
    if len(home) != 1:
        raise UsageError(f"{cache}: expected one CMAKE_HOME_DIRECTORY entry, found {len(home)}")
    found = Path(home[0]).resolve()
    if given is not None and given.resolve() != found:
        raise UsageError(f"--source {given} is not the source folder the build was configured from ({found})")
    return found


def _git(source: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"git {' '.join(args)} in {source} could not run ({exc})") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise UsageError(f"{source}: expected a git checkout of the engine (git {' '.join(args)} exited "
                         f"{done.returncode}: {first})")
    return done.stdout


def engine_commit(source: Path) -> str:
    return _git(source, "rev-parse", "HEAD").strip()


def modified_files(source: Path) -> list[str]:
    """Tracked files under the source folder that differ from the commit (untracked build output is not a change)."""
    out = _git(source, "status", "--porcelain", "--untracked-files=no", "--", ".")
    return [line[3:] for line in out.splitlines() if line.strip()]


class Workspace:
    """Applies one mutant at a time to the source and always puts the original bytes back."""

    def __init__(self, source: Path, out: Path) -> None:
        self.source = source
        self.state = out / STATE
        self.originals = out / ORIGINALS

    def check_clean(self) -> None:
        """Refuse a source folder left changed: by an earlier run (its record) or by anyone else (git status)."""
        if self.state.exists():
            raise UsageError(f"{self.state} says a mutant is still applied to {self.source} (an earlier run was killed): "
                             "run again with --restore to put the original file back")
        changed = modified_files(self.source)
        if changed:
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            raise UsageError(f"{self.source}: expected an unmodified engine checkout (git status), found changes this "
                             f"calibration did not make: {shown}; commit or revert them first")

    def apply(self, mutant: Mutant) -> None:
        path = self.source / mutant.file
        original = path.read_bytes()
        try:
            changed = mutate(original.decode("utf-8"), mutant).encode("utf-8")
        except UnicodeDecodeError as exc:
            raise CatalogueError(f"mutant {mutant.name}: {mutant.file} is not UTF-8 ({exc})") from None
        keep = self.originals / mutant.file
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_bytes(original)
        self.state.parent.mkdir(parents=True, exist_ok=True)
        self.state.write_text(json.dumps({"mutant": mutant.name, "file": mutant.file,
                                          "sha256": hashlib.sha256(original).hexdigest()}) + "\n", encoding="utf-8")
        path.write_bytes(changed)

    def restore(self) -> str | None:
        """Put back the file a recorded mutant changed; returns its name (None: nothing was applied)."""
        if not self.state.exists():
            return None
        try:
            record: dict[str, Any] = json.loads(self.state.read_text(encoding="utf-8"))
            keep = self.originals / str(record["file"])
            data = keep.read_bytes()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{self.state}: expected a record of the applied mutant and its kept original ({exc}); "
                             "restore the engine's source by hand (git checkout)") from None
        if hashlib.sha256(data).hexdigest() != record.get("sha256"):
            raise UsageError(f"{keep}: the kept original does not match its recorded SHA-256; restore {record['file']} "
                             "by hand (git checkout)")
        (self.source / str(record["file"])).write_bytes(data)
        self.state.unlink()
        return str(record["mutant"])


class Interrupted(NoVerdictError):
    """SIGINT or SIGTERM arrived; the source was put back."""


@contextlib.contextmanager
def restoring_on_signals(ws: Workspace, say: Any) -> Iterator[None]:
    """SIGINT and SIGTERM put the applied file back, then end the run (Interrupted)."""

    def on_signal(signum: int, _frame: Any) -> None:
        restored = ws.restore()
        done = f"restored the file mutant {restored} changed" if restored else "no mutant was applied"
        say(f"signal {signum}: {done}")
        raise Interrupted(f"interrupted by signal {signum}: {done}; the calibration is incomplete")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
