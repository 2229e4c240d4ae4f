"""The short ``gate.yml`` ``ds4ci init`` writes by default: it calls ds4ci's own gate workflow (workflow_call).

The adopter's file holds only what GitHub needs from the calling side: the events (``pull_request_target``,
so GitHub runs the default branch's copy of it whatever a pull request's base, ``merge_group`` for a merge
queue, and ``workflow_dispatch`` with the inputs it offers), the run's
title (``run-name``: ``merge-check`` and ``dispatch-check`` read the head from it), the token's permissions
and the pinned call. ds4ci is named twice, the same way: in ``uses:`` (the workflow GitHub runs) and in the
``ds4ci-ref`` input (the ds4ci that workflow installs, since a called workflow cannot see its own ref).
``ds4ci upgrade`` moves both; ``config check`` warns when they disagree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ds4ci.errors import UsageError
from ds4ci.options.values import DS4CI_REF_PLACEHOLDER

NAME = "gate.yml"
CALLED = ".github/workflows/gate.yml"  # ds4ci's own workflow the caller names
# Every permission a job of the called workflow asks for: a called job gets no more than its caller allows.
PERMISSIONS = "{actions: read, checks: write, contents: read, pull-requests: write, statuses: write}"
# The ``uses:`` line, with the trailing comment ``_uses`` writes (a zizmor suppression on a tag pin) or none.
_USES = re.compile(r"^(?P<lead>[ \t]+)uses:[ \t]*(?P<repo>[^\s/]+/[^\s/@]+)/\.github/workflows/gate\.yml@(?P<ref>[^\s#]+)"
                   r"(?:[ \t]+#[^\n]*)?[ \t]*$", re.MULTILINE)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# zizmor's unpinned-uses asks for a commit pin; a tag pin is the adopter's choice (docs/adopting.md), said on
# the line itself (zizmor reads its suppressions from the line of the finding), and dropped on a commit pin.
TAG_PIN_NOTE = "# zizmor: ignore[unpinned-uses] a tag pin, by choice (a commit pin needs no ignore)"
_INPUT = re.compile(r"^(?P<lead>[ \t]+)with:[ \t]*\{ds4ci-ref:[ \t]*(?P<value>.*?)\}[ \t]*$", re.MULTILINE)
_PLACEHOLDER_USES = "OWNER/ds4ci/.github/workflows/gate.yml@TODO"


def render(ref: str | None) -> str:
    """The caller workflow, pinned to ``ref`` (OWNER/NAME@REF), else to the placeholder ``config check`` names."""
    if ref is None:
        uses, named = _uses(*_PLACEHOLDER_USES.split("@")), DS4CI_REF_PLACEHOLDER
    else:
        repository, _, at = ref.partition("@")
        uses, named = _uses(f"{repository}/{CALLED}", at), ref
    return f"""\
# ds4ci's parity gate on this repository's pull requests: ds4ci's own gate workflow at the pinned tag or
# commit, run as this repository's run. pull_request_target: GitHub runs this file as the default branch
# has it (whatever a pull request's base), so no pull request chooses what gates it; merge_group: a merge
# queue's commit is gated too. Written by `ds4ci init`; `ds4ci upgrade --ds4ci-ref
# OWNER/NAME@REF` moves both pins below (they must name the same ds4ci). Settings: ds4ci.toml. Dispatch
# inputs it also reads when offered here: runners, allow-focused-reruns, bisect (ds4ci's docs/adopting.md).
# actionlint's cache-call-unrestricted: the called workflow uses no cache, and act (`ds4ci rehearse`) does
# not know `cache-mode` yet; ds4ci's docs/adopting.md gives the actionlint.yaml entry that suppresses it.
name: ds4ci gate
run-name: ds4ci gate ${{{{ inputs.head-sha || github.event.pull_request.head.sha || github.event.merge_group.head_sha }}}}
on:
  pull_request_target: {{types: [opened, synchronize, reopened]}} # zizmor: ignore[dangerous-triggers] head is data
  merge_group: {{types: [checks_requested]}}
  workflow_dispatch:
    inputs:
      pr: {{description: Pull request number to gate, required: true, type: string}}
      head-sha: {{description: Full 40-hex head SHA you reviewed, required: true, type: string}}
      widths: {{description: "Draft widths, e.g. 3 (empty: those of ds4ci.toml)", type: string, default: ""}}
permissions: {{}}
jobs:
  ds4ci:
    uses: {uses}
    with: {{ds4ci-ref: {json.dumps(named)}}}
    permissions: {PERMISSIONS}
"""


def repin(text: str, ref: str, where: Path) -> str:
    """A caller's text with its ``uses:`` and ``ds4ci-ref`` moved to ``ref``; every other line as it was (the
    inputs an adopter added, comments)."""
    repository, _, at = ref.partition("@")
    out = text
    for pattern, line in ((_USES, f"uses: {_uses(f'{repository}/{CALLED}', at)}"),
                          (_INPUT, f"with: {{ds4ci-ref: {json.dumps(ref)}}}")):
        found = list(pattern.finditer(out))
        if len(found) != 1:
            raise UsageError(f"{where}: expected one `{line.split(':')[0]}:` line naming ds4ci (as `ds4ci init` writes "
                             f"it), found {len(found)}; nothing was written")
        start, end = found[0].span()
        out = out[:start] + found[0].group("lead") + line + out[end:]
    return out


def _uses(workflow: str, at: str) -> str:
    """What follows ``uses:``: the pinned workflow, and on a tag pin the suppression that says so."""
    return f"{workflow}@{at}" if _COMMIT.match(at) else f"{workflow}@{at} {TAG_PIN_NOTE}"


def pins(text: str) -> tuple[str | None, str | None]:
    """What a caller names: the ds4ci of its ``uses:`` (OWNER/NAME@REF) and its ``ds4ci-ref`` input; None where
    the file has no such line (it is not a caller)."""
    uses, named = _USES.search(text), _INPUT.search(text)
    called = f"{uses.group('repo')}@{uses.group('ref')}" if uses is not None else None
    return called, unquote(named.group("value").strip()) if named is not None else None


def unquote(raw: str) -> str:
    """A YAML scalar as written on one line: a double-quoted one read as JSON, a single-quoted one unwrapped."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        try:
            return str(json.loads(raw)) if raw[0] == '"' else raw[1:-1]
        except ValueError:
            return raw
    return raw


def is_caller(text: str) -> bool:
    return pins(text) != (None, None)
