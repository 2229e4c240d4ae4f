"""Reading the results documents publishing and ``ds4ci report`` show: one per runner, strictly validated.

The only place under ``ds4ci.report`` that reads a results document (a ``results.json`` or the one inside an
evidence bundle); everything else takes the :class:`~ds4ci.report.docview.DocView` built from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ds4ci.errors import UsageError
from ds4ci.records import Results

MAX_RUNNERS = 32


def check_inputs(paths: Sequence[Path]) -> None:
    """One input per runner, at least one, at most as many as fit one comment."""
    if not paths:
        raise UsageError("no results given: pass one results.json or evidence bundle per runner")
    if len(paths) > MAX_RUNNERS:
        raise UsageError(f"{len(paths)} results given; at most {MAX_RUNNERS} runners fit one comment")


def unique_runners(docs: list[Results]) -> list[Results]:
    """The documents, refused when two name the same runner."""
    seen: set[str] = set()
    for doc in docs:
        name = doc["runner"]["name"]
        if name in seen:
            raise UsageError(f"runner {name!r} appears twice: expected one result per runner")
        seen.add(name)
    return docs


def load_one(path: Path) -> Results:
    """One results.json, or the one inside an evidence bundle (a directory or a .tar.gz, as verify and publish
    take), read through the confined reader and strictly validated; rendering it verifies nothing."""
    from ds4ci.evidence import bundle, results
    from ds4ci.evidence.store import RESULTS
    from ds4ci.judging import confined

    if not (path.is_dir() or path.name.endswith(".tar.gz")):
        return results.load(path)
    try:
        with bundle.opened(path) as root:
            return results.loads(confined.read_bytes(root, RESULTS, results.MAX_RESULTS_BYTES), f"{path}/{RESULTS}")
    except (bundle.BundleError, confined.ConfinedError) as exc:
        raise UsageError(f"{path}: expected an evidence bundle holding {RESULTS}, found none readable ({exc})") from exc


def load_all(paths: Sequence[Path]) -> list[Results]:
    """Strictly load every results file (or bundle's); runner names must be unique across them."""
    check_inputs(paths)
    return unique_runners([load_one(p) for p in paths])
