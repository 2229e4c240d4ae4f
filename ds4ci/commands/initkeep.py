"""What ``ds4ci init --force`` may replace: only a ``ds4ci.toml`` whose settings are all ones init wrote.

init stamps the file it writes with a digest of its settings (a comment line, :data:`MARK`). Over a file whose
settings still match that digest, ``--force`` rewrites freely (every key in it is init's). Over a file edited
since (a runner table added, ``approvals = 2``) or one with no stamp, it refuses when a key would be dropped
or changed, and names each one: those are the adopter's, and ``ds4ci upgrade`` moves the workflows without
touching the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options.values import loads_toml

MARK = "# init-settings-digest: "  # followed by the digest of the settings init wrote
SHOWN = 8  # keys named in the refusal


def digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:24]


def stamped(text: str, where: str) -> str:
    """``text`` with the digest of its settings as its second line (after the first comment line)."""
    first, _, rest = text.partition("\n")
    note = f"{MARK}{digest(loads_toml(text, where))} (`init --force` replaces this file only while it holds these)"
    return f"{first}\n{note}\n{rest}"


def _leaves(doc: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, f"{name}.")
        else:
            yield name, value


def _recorded(text: str) -> str | None:
    found = [line[len(MARK):].split(" ", 1)[0] for line in text.splitlines() if line.startswith(MARK)]
    return found[0] if len(found) == 1 else None


def not_written_by_init(old_text: str, new_text: str, where: str) -> list[str]:
    """The keys of ``old_text`` that replacing it with ``new_text`` would drop or change, unless every key of it
    is one init wrote (its settings still match its stamp)."""
    old = loads_toml(old_text, f"the existing {where}")
    if _recorded(old_text) == digest(old):
        return []
    new = dict(_leaves(loads_toml(new_text, where)))
    lost = []
    for key, value in _leaves(old):
        if key not in new:
            lost.append(f"{key} (init does not write it)")
        elif new[key] != value:
            lost.append(f"{key} = {json.dumps(value, default=str)} (init writes {json.dumps(new[key], default=str)})")
    return lost


def refuse_discarding(path: Path, new_text: str) -> None:
    """Refuse to overwrite ``path`` when that would drop or change a key init did not write; nothing is written."""
    if not path.is_file():
        return
    try:
        old_text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} cannot be read ({exc}); expected the ds4ci.toml that --force would replace") from None
    lost = not_written_by_init(old_text, new_text, str(path))
    if lost:
        more = f"; and {len(lost) - SHOWN} more" if len(lost) > SHOWN else ""
        raise UsageError(
            f"{path} holds settings init did not write, which --force would discard: {'; '.join(lost[:SHOWN])}{more}. "
            "Keep the file: `ds4ci upgrade --ds4ci-ref OWNER/NAME@REF` moves the workflows and never touches it, "
            "`ds4ci pin` refreshes its pins; or edit it by hand, or remove it to start over. ds4ci.toml, .gitignore "
            "and the workflows were left as they were"
        )
