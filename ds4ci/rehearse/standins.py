"""Local stand-ins for the three remote actions the workflows use, as composite actions act runs in their place.

act reaches a remote action by cloning it from github.com ("Set up job" fails offline); ``--local-repository
USES=DIR`` makes it use DIR instead. The stand-ins take the inputs the workflows pass:
checkout fetches the ref from a local repository named per ``repository`` (the adopter's own, ds4ci's), and
the artifact actions copy into and out of one shared folder.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

CHECKOUT, UPLOAD, DOWNLOAD = "actions/checkout", "actions/upload-artifact", "actions/download-artifact"
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*[\"']?((?:actions/checkout|actions/upload-artifact|actions/download-artifact)"
                   r"@[A-Za-z0-9._/-]+)", re.MULTILINE)


@dataclass(frozen=True)
class Remote:
    """A repository the checkout stand-in serves from a local folder; ``pinned``: a ref it serves as ``served``
    (the ds4ci a workflow pins, served from a commit of the source that runs here)."""

    path: Path
    pinned: str = ""
    served: str = ""


def uses_in(workflows: list[Path]) -> dict[str, str]:
    """Each remote action the workflows name (``actions/checkout@<sha>``, ...) -> its action (``actions/checkout``)."""
    found: dict[str, str] = {}
    for path in workflows:
        for match in _USES.finditer(path.read_text(encoding="utf-8", errors="replace")):
            found[match.group(1)] = match.group(1).split("@", 1)[0]
    return found


def write(folder: Path, remotes: dict[str, Remote], store: Path) -> dict[str, Path]:
    """The three stand-ins under ``folder``: action name -> its folder. ``store`` holds the artifacts."""
    return {CHECKOUT: _action(folder / "checkout", _checkout(remotes)),
            UPLOAD: _action(folder / "upload", _upload(store)),
            DOWNLOAD: _action(folder / "download", _download(store))}


def _action(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "action.yml").write_text(textwrap.dedent(body), encoding="utf-8")
    return directory


def _checkout(remotes: dict[str, Remote]) -> str:
    cases = " ".join(f"{name}) remote={shlex.quote(str(r.path))}; pinned={shlex.quote(r.pinned)}; "
                     f"served={shlex.quote(r.served)};;" for name, r in remotes.items())
    return f"""\
        name: checkout stand-in (fetches the pinned ref from a local remote)
        inputs:
          repository: {{default: ""}}
          ref: {{default: ""}}
          path: {{default: ""}}
          persist-credentials: {{default: "true"}}
          sparse-checkout: {{default: ""}}
          sparse-checkout-cone-mode: {{default: "true"}}
          fetch-depth: {{default: "1"}}
        runs:
          using: composite
          steps:
            - shell: bash
              env:
                REPOSITORY: ${{{{ inputs.repository }}}}
                REF: ${{{{ inputs.ref }}}}
                DEST: ${{{{ inputs.path }}}}
                PERSIST: ${{{{ inputs.persist-credentials }}}}
                DEPTH: ${{{{ inputs.fetch-depth }}}}
              run: |
                set -euo pipefail
                pinned="" served=""
                case "$REPOSITORY" in {cases} *) echo "unexpected repository $REPOSITORY"; exit 1;; esac
                if [ -n "$pinned" ] && [ "$REF" = "$pinned" ]; then REF="$served"; fi
                test "$PERSIST" = false || {{ echo "persist-credentials must be false"; exit 1; }}
                dest="$GITHUB_WORKSPACE/$DEST"
                mkdir -p "$dest"
                find "$dest" -mindepth 1 -maxdepth 1 ! -name "$(basename "$GITHUB_WORKSPACE/subject")" \\
                  -exec rm -rf {{}} + 2>/dev/null || true
                git -C "$dest" init -q
                git -C "$dest" fetch -q "$remote" "$REF"
                git -C "$dest" -c advice.detachedHead=false checkout -q FETCH_HEAD
                # fetch-depth 0: every branch too, as origin/<branch> (what the real action fetches).
                if [ "$DEPTH" = 0 ]; then git -C "$dest" fetch -q "$remote" '+refs/heads/*:refs/remotes/origin/*'; fi
        """


def _upload(store: Path) -> str:
    return f"""\
        name: upload-artifact stand-in (copies into a shared directory)
        inputs:
          name: {{required: true}}
          path: {{required: true}}
          if-no-files-found: {{default: warn}}
          retention-days: {{default: "0"}}
        runs:
          using: composite
          steps:
            - shell: bash
              env:
                NAME: ${{{{ inputs.name }}}}
                SRC: ${{{{ inputs.path }}}}
                MISSING: ${{{{ inputs.if-no-files-found }}}}
              run: |
                set -euo pipefail
                # path may list several files or directories, one per line, as the real action allows.
                found=0
                mkdir -p "{store}/$NAME"
                while IFS= read -r src; do
                  [[ -n "$src" ]] || continue
                  if [[ ! -e "$src" ]]; then echo "no files at $src"; continue; fi
                  found=1
                  if [[ -d "$src" ]]; then cp -a "$src/." "{store}/$NAME/"; else cp -a "$src" "{store}/$NAME/"; fi
                done <<< "$SRC"
                if (( ! found )); then [[ "$MISSING" != error ]]; fi
        """


def _download(store: Path) -> str:
    return f"""\
        name: download-artifact stand-in (copies from the shared directory)
        inputs:
          name: {{default: ""}}
          pattern: {{default: ""}}
          path: {{default: "."}}
          run-id: {{default: ""}}
          github-token: {{default: ""}}
        runs:
          using: composite
          steps:
            - shell: bash
              env:
                NAME: ${{{{ inputs.name }}}}
                PATTERN: ${{{{ inputs.pattern }}}}
                DEST: ${{{{ inputs.path }}}}
              run: |
                set -euo pipefail
                mkdir -p "$DEST"
                if [[ -n "$NAME" ]]; then cp -a "{store}/$NAME/." "$DEST/"; exit 0; fi
                shopt -s nullglob
                for dir in "{store}"/$PATTERN; do cp -a "$dir" "$DEST/"; done
        """
