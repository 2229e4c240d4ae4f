"""``ds4ci tiny-models DIR``: write the tiny DS4 target, DSpark draft, prompts and pinned ds4ci.toml."""

from __future__ import annotations

from pathlib import Path

from ds4ci.errors import EXIT_PASS, UsageError
from ds4ci.tinymodels.shapes import KINDS, SUCCESSOR

SEED_MAX = 2**32 - 1


def run_tiny_models(folder: Path, seed: int, kind: str = SUCCESSOR, design: str | None = None) -> int:
    """``design``: a name of ``design.BY_NAME`` (any case; None: the shipped design)."""
    if kind not in KINDS:
        raise UsageError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if design is not None and kind != SUCCESSOR:
        raise UsageError(f"--design applies to the successor kind only, not --kind {kind}")
    if not 0 <= seed <= SEED_MAX:
        raise UsageError(f"--seed must be between 0 and {SEED_MAX}, got {seed}")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} exists and is not a directory: give a new or existing directory")
    try:
        from ds4ci.tinymodels.bundle import write_tiny_set
        from ds4ci.tinymodels.design import BY_NAME, SHIPPED
    except ImportError as exc:
        raise UsageError(f"tiny-models needs the gguf package: pip install 'ds4ci[tiny]' ({exc})") from exc
    chosen = SHIPPED if design is None else BY_NAME.get(design.upper().replace("-", "_"))
    if chosen is None:
        raise UsageError(f"--design must be one of {', '.join(BY_NAME)}, got {design!r}")
    made = write_tiny_set(folder, seed, kind=kind, design=chosen)
    for name, digest in made.sha256.items():
        print(f"{folder / name}: sha256 {digest}")
    print(f"{made.config}: pins all of them; run `ds4ci gate --config {made.config} --server-bin PATH`")
    return EXIT_PASS
