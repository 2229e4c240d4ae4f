"""The one default config path of every command: ``--config``, else ``./ds4ci.toml`` when it exists.

``gate``, ``preflight``, ``config check``, ``config runners``, ``dispatch-check`` and ``merge-check``
all read the file through :func:`resolve`, so no command quietly runs without the file the others read.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ds4ci.options.table import DEFAULT_CONFIG


def resolve(given: Path | None, command: str, quiet: bool = False) -> Path | None:
    """``given``; else ``./ds4ci.toml`` when it exists (said on stderr unless ``quiet``); else None."""
    if given is not None:
        return given
    found = Path(DEFAULT_CONFIG)
    if not found.is_file():
        return None
    if not quiet:
        print(f"ds4ci {command}: config: ./{DEFAULT_CONFIG} (found in the working directory; --config names another)",
              file=sys.stderr, flush=True)
    return found


def required(given: Path | None) -> Path:
    """For a command that needs a file: ``given``, else ``./ds4ci.toml`` (whether or not it exists: the reader says)."""
    return given if given is not None else Path(DEFAULT_CONFIG)
