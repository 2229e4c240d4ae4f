"""What ``ds4ci init`` writes as ``[build]``: the command that builds the server from the checkout.

Read from the repository init runs in (the maintainer's own files, at init time): a ``CMakePresets.json``
with a configure preset gives ``cmake --preset NAME && cmake --build --preset NAME``; a
``CMakeLists.txt`` gives a plain configure and build in ``build/``; anything else gets the same plain
CMake command with a note that says to name the command (``init --build-command``). The server binary
is ``<build folder>/bin/dflash_server`` unless ``--server-bin`` names it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_NAME = "dflash_server"
PLAIN_DIR = "build"


@dataclass(frozen=True)
class BuildGuess:
    command: str
    server_bin: str  # relative to the repository root
    found: str  # what the command came from, for the comment above [build]


def _plain(found: str) -> BuildGuess:
    command = (f"cmake -S . -B {PLAIN_DIR} -DCMAKE_BUILD_TYPE=Release && "
               f"cmake --build {PLAIN_DIR} -j --target {SERVER_NAME}")
    return BuildGuess(command, f"{PLAIN_DIR}/bin/{SERVER_NAME}", found)


def _presets(path: Path) -> list[dict[str, Any]] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    found = doc.get("configurePresets") if isinstance(doc, dict) else None
    return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else None


def _binary_dir(preset: dict[str, Any], name: str) -> str:
    """The preset's ``binaryDir`` relative to the source folder (``${sourceDir}/`` dropped), else ``build``."""
    raw = preset.get("binaryDir")
    if not isinstance(raw, str) or not raw:
        return PLAIN_DIR
    text = raw.replace("${presetName}", name).replace("${sourceDir}/", "").replace("${sourceDir}", ".")
    return text if "${" not in text and not text.startswith("/") else PLAIN_DIR


def guess(root: Path) -> BuildGuess:
    presets = root / "CMakePresets.json"
    configure = _presets(presets) if presets.is_file() else None
    usable = [p for p in configure or [] if isinstance(p.get("name"), str) and not p.get("hidden")]
    if usable:
        preset = usable[0]
        name = str(preset["name"])
        doc = json.loads(presets.read_text(encoding="utf-8"))
        builds = [b for b in doc.get("buildPresets", []) if isinstance(b, dict) and b.get("configurePreset") == name
                  and isinstance(b.get("name"), str) and not b.get("hidden")]
        build = (f"cmake --build --preset {shlex.quote(str(builds[0]['name']))}" if builds
                 else f"cmake --build {shlex.quote(_binary_dir(preset, name))} -j")
        command = f"cmake --preset {shlex.quote(name)} && {build} --target {SERVER_NAME}"
        return BuildGuess(command, f"{_binary_dir(preset, name)}/bin/{SERVER_NAME}",
                          f"CMakePresets.json (configure preset {name!r})")
    if (root / "CMakeLists.txt").is_file():
        return _plain("CMakeLists.txt")
    return _plain("no CMakeLists.txt here: a guess; name your build with `ds4ci init --build-command CMD`")
