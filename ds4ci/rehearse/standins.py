"""Local stand-ins for the three remote actions the workflows use, as composite actions act runs in their place.

act reaches a remote action by cloning it from github.com ("Set up job" fails offline); ``--local-repository
USES=DIR`` makes it use DIR instead. The stand-ins take the inputs the workflows pass:
checkout fetches the ref from a local repository named per ``repository`` (the adopter's own, ds4ci's), and
the artifact actions copy into and out of one shared folder.

The checkout stand-in keeps the fork guard of actions/checkout v7 (and v6.1.0): under pull_request_target or
workflow_run it refuses to check out a fork pull request's code (the fork's repository, a ``refs/pull/N/head``
or ``merge`` ref, or the commit the event names as the pull request's head or merge) unless the step sets
``allow-unsafe-pr-checkout: true``, judged as checkout judges it (``guard.py``, from the event's payload).
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
    guard = folder / "checkout-guard" / "guard.py"
    guard.parent.mkdir(parents=True)
    guard.write_text(GUARD, encoding="utf-8")
    return {CHECKOUT: _action(folder / "checkout", _checkout(remotes, guard)),
            UPLOAD: _action(folder / "upload", _upload(store)),
            DOWNLOAD: _action(folder / "download", _download(store))}


def _action(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "action.yml").write_text(textwrap.dedent(body), encoding="utf-8")
    return directory


# actions/checkout's assertSafePrCheckout (src/unsafe-pr-checkout-helper.ts, v7.0.1), as a program: argv is the
# step's repository (OWNER/NAME), ref and allow-unsafe-pr-checkout; the event is $GITHUB_EVENT_NAME's payload.
GUARD = r'''"""checkout's fork guard: exit 1 with its message where it refuses the checkout, else 0."""
import json, os, re, sys

repository, ref, allow = sys.argv[1:4]
event = os.environ.get("GITHUB_EVENT_NAME", "")
if allow.upper() == "TRUE" or event not in ("pull_request_target", "workflow_run"):
    sys.exit(0)
with open(os.environ["GITHUB_EVENT_PATH"], encoding="utf-8") as fh:
    doc = json.load(fh)


def at(*keys):
    value = doc
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def number(value):
    return isinstance(value, int) and not isinstance(value, bool)


base = at("repository", "id")
if not number(base):
    sys.exit(0)
if event == "pull_request_target":
    head_id, head_name = at("pull_request", "head", "repo", "id"), at("pull_request", "head", "repo", "full_name")
    shas = [at("pull_request", "head", "sha"), at("pull_request", "merge_commit_sha")]
else:
    run_event = at("workflow_run", "event")
    if not isinstance(run_event, str) or not run_event.startswith("pull_request"):
        sys.exit(0)
    head_id, head_name = at("workflow_run", "head_repository", "id"), at("workflow_run", "head_repository", "full_name")
    shas = [at("workflow_run", "head_commit", "id")]
    if run_event != "pull_request_target":
        shas.append(at("workflow_run", "head_sha"))
if not number(head_id) or head_id == base:
    sys.exit(0)
commit = ref.lower() if re.fullmatch(r"[0-9a-fA-F]{40}", ref) else ""
if not (isinstance(head_name, str) and repository.lower() == head_name.lower()) and not re.fullmatch(
        r"refs/pull/[0-9]+/(?:head|merge)", ref) and not (commit and commit in [s.lower() for s in shas if s]):
    sys.exit(0)
print(f"::error::Refusing to check out fork pull request code from a '{event}' workflow. This workflow runs with "
      "the base repository's GITHUB_TOKEN, secrets, default-branch cache scope, and runner access. (...) set "
      "'allow-unsafe-pr-checkout: true' on the actions/checkout step.")
sys.exit(1)
'''


def _checkout(remotes: dict[str, Remote], guard: Path) -> str:
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
          allow-unsafe-pr-checkout: {{default: "false"}}
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
                ALLOW_UNSAFE: ${{{{ inputs.allow-unsafe-pr-checkout }}}}
              run: |
                set -euo pipefail
                python3 -I {shlex.quote(str(guard))} "$REPOSITORY" "$REF" "$ALLOW_UNSAFE"
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
