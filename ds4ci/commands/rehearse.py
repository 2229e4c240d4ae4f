"""``ds4ci rehearse``: the repository's own workflows under act on this machine, and what the pull request shows."""

from __future__ import annotations

import json

from ds4ci.commands.workflowpin import named
from ds4ci.errors import UsageError
from ds4ci.options.values import DS4CI_REF
from ds4ci.rehearse.outcome import as_json, exit_code, render
from ds4ci.rehearse.run import EVENTS, Rehearsal, rehearse
from ds4ci.textsafe import json_text


def workflows_ds4ci(text: str, where: str) -> str:
    """The ds4ci a gate.yml runs (a caller's `uses:` and `ds4ci-ref`, which must agree; a copy's DS4CI_REF);
    refused unless OWNER/NAME@REF."""
    value, label, problems = named(where, text)
    if problems:
        raise UsageError(problems[0])
    if value is None or not DS4CI_REF.match(value):
        raise UsageError(f"{where}: expected {label}: OWNER/NAME@REF (a tag or a full commit; ds4ci init "
                         f"--ds4ci-ref or ds4ci upgrade --ds4ci-ref writes it), found {value or 'no such line'!r}")
    return value


def events_of(name: str) -> tuple[str, ...]:
    if name not in EVENTS:
        raise UsageError(f"--event: expected one of {', '.join(EVENTS)}, found {name!r}")
    return EVENTS[name]


def run_rehearse(r: Rehearsal, as_json_out: bool) -> int:
    """The rehearsal printed as text (or JSON); its exit code (docs/exit-codes.md)."""
    outcomes = rehearse(r, workflows_ds4ci)
    if as_json_out:
        print(json_text(json.dumps(as_json(outcomes), indent=2)))
    else:
        print(render(outcomes), end="")
        if r.keep is not None:
            print(f"the work folder, with each event's act.log: {r.keep}")
    return exit_code(outcomes)
