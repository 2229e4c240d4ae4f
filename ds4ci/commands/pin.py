"""``ds4ci pin``: refresh the SHA-256 pins of a ``ds4ci.toml`` in place, from the files on this machine.

Only the pin values change: every other byte of the file (comments, order, the workflows) stays as it
was. A pin is rewritten when its file is here and its bytes hash to something else (a ``TODO`` pin
included); a file that is not here keeps its pin and is listed. The file is parsed again after the
edit and must give exactly the new pins, else nothing is written.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.errors import EXIT_PASS, UsageError
from ds4ci.fileio import write_text_atomic
from ds4ci.options import configpath
from ds4ci.options import values as v

_KEYS = (("target", "target_sha256"), ("draft", "draft_sha256"), ("server_bin", "server_sha256"))
_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")


@dataclass(frozen=True)
class Pin:
    section: str  # "gate" or "runners.<name>"
    key: str  # target_sha256, ..., or "prompts[i].sha256"
    file: str  # as written in the config
    old: str
    prompt: bool = False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pins(doc: dict[str, Any]) -> list[Pin]:
    tables: list[tuple[str, Any]] = [("gate", doc.get("gate", {}))]
    runners = doc.get("runners", {})
    if isinstance(runners, dict):
        tables += [(f"runners.{name}", t) for name, t in runners.items()]
    found: list[Pin] = []
    for section, t in tables:
        if not isinstance(t, dict):
            continue
        for file_key, pin_key in _KEYS:
            if isinstance(t.get(file_key), str) and isinstance(t.get(pin_key), str):
                found.append(Pin(section, pin_key, t[file_key], t[pin_key]))
        for i, prompt in enumerate(t.get("prompts", []) if isinstance(t.get("prompts"), list) else []):
            if isinstance(prompt, dict) and isinstance(prompt.get("file"), str) and isinstance(prompt.get("sha256"), str):
                found.append(Pin(section, f"prompts[{i}].sha256", prompt["file"], prompt["sha256"], prompt=True))
    return found


def _here(pin: Pin, base: Path) -> Path | None:
    try:
        path = v.path(pin.file, pin.key, base)
    except UsageError:  # an unset ${VAR}: the file is the runner's, not this machine's
        return None
    return path if path.is_file() else None


def _rewrite(lines: list[str], pin: Pin, new: str) -> bool:
    """Replace ``pin.old`` by ``new`` on the one line of ``pin.section`` that holds it; False when not exactly one."""
    section, at = "", []
    for i, line in enumerate(lines):
        header = _HEADER.match(line)
        if header:
            section = header.group(1).strip()
            continue
        if section != pin.section or f'"{pin.old}"' not in line:
            continue
        if pin.prompt and re.search(r'\bfile\s*=\s*"' + re.escape(pin.file) + '"', line) is None:
            continue
        if not pin.prompt and re.match(rf'\s*{pin.key}\s*=\s*"', line) is None:
            continue
        at.append(i)
    if len(at) != 1:
        return False
    lines[at[0]] = lines[at[0]].replace(f'"{pin.old}"', f'"{new}"', 1)
    return True


def _write_checked(path: Path, text: str, before: dict[tuple[str, str], str], renewed: dict[tuple[str, str], str]) -> None:
    """Write ``text`` only when it parses to the same pins as before with exactly ``renewed`` changed."""
    scratch = path.with_name(f".{path.name}.ds4ci-pin")
    write_text_atomic(scratch, text)
    try:
        after = {(p.section, p.key): p.old for p in _pins(v.read_toml(scratch))}
        if after != {**before, **renewed}:
            raise UsageError(f"{path}: nothing written: the edited file would not hold exactly the new pins")
        scratch.replace(path)
    finally:
        scratch.unlink(missing_ok=True)


def run_pin(config: Path | None) -> int:
    path = configpath.required(config)
    doc = v.read_toml(path)
    text = path.read_text(encoding="utf-8")
    base = path.resolve().parent
    lines = text.split("\n")
    changed: list[str] = []
    missing: list[str] = []
    stuck: list[str] = []
    renewed: dict[tuple[str, str], str] = {}
    for pin in _pins(doc):
        where = f"{pin.section}.{pin.key}"
        found = _here(pin, base)
        if found is None:
            missing.append(f"{where}: {pin.file} is not on this machine; its pin stays {pin.old[:16]}…")
            continue
        new = _sha256(found)
        if new == pin.old:
            continue
        if _rewrite(lines, pin, new):
            renewed[(pin.section, pin.key)] = new
            changed.append(f"{where}: {pin.old[:16]}… -> {new} ({found})")
        else:
            stuck.append(f"{where}: its value is not on one line of [{pin.section}]; put {new} there by hand")
    if stuck:
        raise UsageError(f"{path}: nothing written: " + "; ".join(stuck))
    if changed:
        _write_checked(path, "\n".join(lines), {(p.section, p.key): p.old for p in _pins(doc)}, renewed)
    for line in changed:
        print(f"pinned {line}")
    for line in missing:
        print(f"kept {line}")
    print(f"{path}: {len(changed)} pin(s) rewritten, {len(missing)} file(s) not here; nothing else was changed")
    return EXIT_PASS
