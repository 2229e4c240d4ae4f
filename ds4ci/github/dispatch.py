"""Validating what starts a gate run: workflow_dispatch inputs, the triggering event, the pinned head.

Everything a workflow hands us here is text typed by a person (dispatch inputs) or taken from
an event payload, so it is parsed strictly and turned into one frozen ``RunPlan``: which pull
request, which exact commit, which widths, which runners. The plan is then written to
``$GITHUB_OUTPUT`` for the jobs that follow, so no later step re-reads raw inputs.

For a manual run the maintainer names a PR *and* the head commit they reviewed; the run is
refused when the PR's current head is something else (a push after the review must not be
gated, and so merged, unseen).

A merge queue's run (``merge_group``) gates the queue's merge commit (``merge_group.head_sha``): the plan
names that commit as the head, says it is a merge (``gated=merge``) and which pull request entered the
queue (its branch ``gh-readonly-queue/<base>/pr-<N>-<sha>`` says so), and names no pull request to
comment on (the pull request's comment is about its own head).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.errors import Ds4ciError, PublishError, UsageError
from ds4ci.options.config import parse_widths
from ds4ci.options.runners import RunnerSpec

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_PR = re.compile(r"^[1-9][0-9]{0,9}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
# Events whose payload names the pull request and its head: the payload is authoritative there.
PR_EVENTS = ("pull_request", "pull_request_target")
MERGE_GROUP = "merge_group"  # a merge queue's entry: the payload names the queue's merge commit
_QUEUE_REF = re.compile(r"^(?:refs/heads/)?gh-readonly-queue/.+/pr-(?P<pr>[1-9][0-9]{0,9})-[0-9a-f]{40}$")


class DispatchInputError(UsageError):
    """A dispatch or workflow input is malformed (exit 2)."""


class HeadMismatchError(UsageError):
    """The PR's current head is not the commit the maintainer pinned (exit 2: re-dispatch)."""


@dataclass(frozen=True)
class EventInfo:
    """What the triggering event says; for a called workflow this is the caller's event."""

    name: str
    pr: int | None = None
    head_sha: str | None = None
    head_repo: str | None = None
    base_repo: str | None = None
    sha: str | None = None  # GITHUB_SHA: the commit the event is about when there is no PR
    queued_pr: int | None = None  # merge_group: the pull request whose queue entry this is (from its branch)


@dataclass(frozen=True)
class RunPlan:
    pr: int | None
    head_sha: str
    widths: tuple[int, ...] | None  # None: the widths of ds4ci.toml
    runners: tuple[RunnerSpec, ...]
    fork: bool  # a PR from another repository: its token cannot write, the reporter publishes
    verify_head: bool  # the PR's current head must be fetched and compared before running
    gated: str = "head"  # "head": a pull request's head (or a named commit); "merge": a merge queue's merge commit
    queued_pr: int | None = None  # gated "merge": the pull request whose queue entry it is, where GitHub says


@dataclass(frozen=True)
class PullHead:
    number: int
    state: str
    head_sha: str
    base_ref: str = ""  # the branch the PR merges into (the definition and settings that gate it are the default branch's)


# What defines the gate itself: a pull request that changes one of these gets no run from pull_request_target
# (its green would vouch for a definition nobody reviewed); a maintainer reviews it and dispatches the gate.
GATE_DEFINITION = (".github/workflows/", ".github/actions/", "action.yml", "ds4ci.toml")
MAX_PR_FILES = 3000  # GitHub lists at most 3000 files of a pull request: more cannot be judged


def parse_pr(text: str, where: str = "pr") -> int:
    value = text.strip()
    if not _PR.match(value):
        raise DispatchInputError(f"{where}: expected a pull request number like 123, found {text!r}")
    return int(value)


def parse_sha(text: str, where: str = "head-sha") -> str:
    value = text.strip()
    if not _HEX40.match(value.lower()):
        raise DispatchInputError(
            f"{where}: expected the full 40-hex commit SHA (git rev-parse HEAD), found {text!r}"
        )
    return value.lower()


def parse_runners(text: str, table: tuple[RunnerSpec, ...] | None) -> tuple[RunnerSpec, ...]:
    """``all`` (or empty) selects every runner; otherwise a comma-separated subset, in table order.

    ``table`` None: no runner table was given (a run that starts no gate job, e.g. the fork reporter's check);
    then only ``all`` is accepted, and it selects none."""
    value = text.strip()
    if value in ("", "all"):
        return table or ()
    if table is None:
        raise DispatchInputError(f"runners: {text!r} names runners but no runner table was given; pass --config "
                                 "ds4ci.toml (its [runners.<name>] tables) or --runner-table")
    known = {r.name: r for r in table}
    wanted = [part.strip() for part in value.split(",")]
    if any(not part for part in wanted):
        raise DispatchInputError(f"runners: expected comma-separated runner names like gfx1151,sm86, found {text!r}")
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise DispatchInputError(
            f"runners: unknown runner(s) {', '.join(unknown)}; expected 'all' or some of {', '.join(known)}"
        )
    if len(set(wanted)) != len(wanted):
        raise DispatchInputError(f"runners: runner listed twice in {text!r}")
    return tuple(r for r in table if r.name in wanted)


def parse_widths_input(text: str) -> tuple[int, ...] | None:
    value = text.strip()
    if not value:
        return None
    try:
        return parse_widths(value, "widths")
    except UsageError as exc:
        raise DispatchInputError(str(exc)) from exc


def read_event(event_name: str, event_path: Path | None, github_sha: str | None) -> EventInfo:
    """Extract the few facts we use from ``$GITHUB_EVENT_PATH``; anything malformed is refused."""
    name = event_name.strip()
    if not name:
        raise DispatchInputError("GITHUB_EVENT_NAME is not set: run this inside a GitHub Actions job or pass --event-name")
    sha = parse_sha(github_sha, "GITHUB_SHA") if github_sha else None
    if name not in (*PR_EVENTS, MERGE_GROUP):
        return EventInfo(name=name, sha=sha)
    what = "the pull request" if name in PR_EVENTS else "the merge queue's commit"
    if event_path is None:
        raise DispatchInputError(f"event {name}: GITHUB_EVENT_PATH is not set, so {what} is unknown")
    try:
        doc: Any = json.loads(event_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DispatchInputError(f"event payload {event_path}: cannot be read as JSON ({exc})") from exc
    if name == MERGE_GROUP:
        return _merge_group(doc, event_path, sha)
    try:
        pull = doc["pull_request"]
        number = pull["number"]
        head_sha = pull["head"]["sha"]
        head_repo = (pull["head"].get("repo") or {}).get("full_name")
        base_repo = pull["base"]["repo"]["full_name"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise DispatchInputError(f"event payload {event_path}: no pull_request number/head/base ({exc!r})") from exc
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise DispatchInputError(f"event payload: pull_request.number is not a PR number: {number!r}")
    if not isinstance(head_sha, str):
        raise DispatchInputError(f"event payload: pull_request.head.sha is not a string: {head_sha!r}")
    return EventInfo(
        name=name,
        pr=number,
        head_sha=parse_sha(head_sha, "event pull_request.head.sha"),
        # A deleted fork has no head repo: treat it as foreign, never as ours.
        head_repo=head_repo if isinstance(head_repo, str) else None,
        base_repo=base_repo if isinstance(base_repo, str) else None,
        sha=sha,
    )


def _merge_group(doc: Any, event_path: Path, sha: str | None) -> EventInfo:
    """A merge queue's event: its merge commit, and the pull request its branch names (None where it names none)."""
    group = doc.get("merge_group") if isinstance(doc, dict) else None
    head, ref = (group.get("head_sha"), group.get("head_ref")) if isinstance(group, dict) else (None, None)
    if not isinstance(head, str):
        raise DispatchInputError(f"event payload {event_path}: no merge_group.head_sha (the queue's merge commit), "
                                 f"found {head!r}")
    found = _QUEUE_REF.match(ref) if isinstance(ref, str) else None
    return EventInfo(name=MERGE_GROUP, head_sha=parse_sha(head, "event merge_group.head_sha"), sha=sha,
                     queued_pr=int(found.group("pr")) if found else None)


def plan(
    event: EventInfo,
    *,
    pr: str = "",
    head_sha: str = "",
    widths: str = "",
    runners: str = "",
    runner_table: tuple[RunnerSpec, ...] | None = None,
) -> RunPlan:
    """Turn inputs plus the event into a RunPlan; every inconsistency is an error, never a guess."""
    width_tuple = parse_widths_input(widths)
    selected = parse_runners(runners, runner_table)
    pr_in = parse_pr(pr) if pr.strip() else None
    sha_in = parse_sha(head_sha) if head_sha.strip() else None

    if event.name in PR_EVENTS:
        assert event.pr is not None and event.head_sha is not None  # read_event guarantees both
        if pr_in is not None and pr_in != event.pr:
            raise DispatchInputError(f"pr: input says #{pr_in} but the {event.name} event is for #{event.pr}")
        if sha_in is not None and sha_in != event.head_sha:
            raise DispatchInputError(
                f"head-sha: input says {sha_in} but the {event.name} event's head is {event.head_sha}"
            )
        fork = event.head_repo is None or event.base_repo is None or event.head_repo != event.base_repo
        return RunPlan(event.pr, event.head_sha, width_tuple, selected, fork=fork, verify_head=False)
    if event.name == MERGE_GROUP:
        assert event.head_sha is not None  # read_event guarantees it
        if pr_in is not None or (sha_in is not None and sha_in != event.head_sha):
            raise DispatchInputError(f"a merge_group run gates the queue's merge commit {event.head_sha}: give no pr "
                                     "and no other head-sha")
        # The queue's commit lives in this repository (no fork); the pull request's comment is about its head.
        return RunPlan(None, event.head_sha, width_tuple, selected, fork=False, verify_head=False, gated="merge",
                       queued_pr=event.queued_pr)

    if event.name == "workflow_dispatch" and (pr_in is None or sha_in is None):
        missing = " and ".join(n for n, v in (("pr", pr_in), ("head-sha", sha_in)) if v is None)
        raise DispatchInputError(
            f"workflow_dispatch needs {missing}: name the pull request and the full head SHA you reviewed"
        )
    if pr_in is not None:
        if sha_in is None:
            raise DispatchInputError(f"pr #{pr_in} given without head-sha: a PR run is pinned to the head you reviewed")
        return RunPlan(pr_in, sha_in, width_tuple, selected, fork=False, verify_head=True)
    sha = sha_in or event.sha
    if sha is None:
        raise DispatchInputError("no commit to gate: give head-sha (GITHUB_SHA is not set either)")
    return RunPlan(None, sha, width_tuple, selected, fork=False, verify_head=False)


def _github(api_url: str, token: str, polite: bool) -> Any:
    from github import Auth, Github  # heavy import kept off the CLI start-up path

    if not token:
        raise DispatchInputError("no GitHub token: set GITHUB_TOKEN (or the variable named by --token-env)")
    # PyGithub's pauses between requests are kind to the real API; tests on loopback turn them off.
    pause_read, pause_write = (0.25, 1.0) if polite else (0.0, 0.0)
    return Github(auth=Auth.Token(token), base_url=api_url.rstrip("/"), retry=None, timeout=30,
                  seconds_between_requests=pause_read, seconds_between_writes=pause_write)


def _ask(what: str, api_url: str, call: Any, where: str = "") -> Any:
    from github import GithubException

    try:
        return call()
    except GithubException as exc:
        if exc.status == 404:
            raise DispatchInputError(f"{what} was not found{where} (HTTP 404)") from exc
        raise PublishError(f"fetching {what}{where} failed: HTTP {exc.status}") from exc
    except Ds4ciError:
        raise
    except Exception as exc:  # network errors surface as many types; all mean "no answer"
        raise PublishError(f"fetching {what}{where} from {api_url} failed: {exc}") from exc


def fetch_pull_head(repo: str, pr: int, *, api_url: str, token: str, polite: bool = True) -> PullHead:
    """Ask the GitHub API for the PR's current state, head commit and base branch."""
    if not _REPO.match(repo):
        raise DispatchInputError(f"repo: expected OWNER/NAME, found {repo!r}")
    client = _github(api_url, token, polite)
    try:
        def facts() -> tuple[Any, Any, Any]:
            pull = client.get_repo(repo, lazy=True).get_pull(pr)
            return pull.state, pull.head.sha, pull.base.ref

        state, head, base = _ask(f"pull request #{pr}", api_url, facts, f" in {repo}")
    finally:
        client.close()
    if not isinstance(head, str) or not _HEX40.match(head):
        raise PublishError(f"the API returned a malformed head SHA for #{pr}: {head!r}")
    return PullHead(number=pr, state=str(state), head_sha=head, base_ref=base if isinstance(base, str) else "")


def fetch_pull_files(repo: str, pr: int, *, api_url: str, token: str, polite: bool = True) -> tuple[str, ...]:
    """Every path the PR adds, changes, removes or renames (both names of a rename)."""
    client = _github(api_url, token, polite)
    what = f"the files of pull request #{pr} of {repo}"

    def listing() -> tuple[int, list[str]]:
        pull = client.get_repo(repo, lazy=True).get_pull(pr)
        names: list[str] = []
        for item in pull.get_files():
            names += [n for n in (item.filename, item.previous_filename) if isinstance(n, str) and n]
        return int(pull.changed_files), names

    try:
        count, names = _ask(what, api_url, listing)
    finally:
        client.close()
    if count >= MAX_PR_FILES:
        raise PublishError(f"{what}: {count} files, and GitHub lists at most {MAX_PR_FILES}; a change to the gate's "
                           "own files could hide past the list, so this pull request is not gated automatically")
    return tuple(names)


MAX_COMPARE_FILES = 300  # GitHub's compare answer lists at most this many files


def fetch_compare_files(repo: str, base: str, head: str, *, api_url: str, token: str,
                        polite: bool = True) -> tuple[str, ...]:
    """Every path that differs between ``base`` and ``head`` (GitHub's compare base...head, both names of a
    rename): for a merge queue's commit against the default branch, the whole group's changes."""
    client = _github(api_url, token, polite)
    what = f"the changes of {head} against {base} in {repo}"

    def listing() -> list[str]:
        names: list[str] = []
        for item in client.get_repo(repo, lazy=True).compare(base, head).files:
            names += [n for n in (item.filename, item.previous_filename) if isinstance(n, str) and n]
        return names

    try:
        names = _ask(what, api_url, listing)
    finally:
        client.close()
    if len(names) >= MAX_COMPARE_FILES:
        raise PublishError(f"{what}: {len(names)} paths, and GitHub's compare lists at most {MAX_COMPARE_FILES} "
                           "files; a change to the gate's own files could hide past the list, so it is not gated "
                           "automatically")
    return tuple(names)


def definition_changes(files: tuple[str, ...]) -> tuple[str, ...]:
    """The paths among ``files`` that define the gate (GATE_DEFINITION), sorted, each once."""
    hits = {f for f in files if any(f == g or (g.endswith("/") and f.startswith(g)) for g in GATE_DEFINITION)}
    return tuple(sorted(hits))


class DefinitionChangeError(UsageError):
    """The PR changes the gate's own definition: only a maintainer's dispatch may gate it (exit 2)."""


def refuse_definition_changes(run: RunPlan, changed: tuple[str, ...], event: str) -> None:
    if changed and event == MERGE_GROUP:
        raise DefinitionChangeError(
            f"the merge queue's commit {run.head_sha} (pull request #{run.queued_pr}'s entry, with every entry ahead "
            f"of it) changes the gate's own definition against the default branch ({', '.join(changed)}); a merge "
            "queue's run would run that changed definition, so it is not "
            "gated there: a maintainer reviews the change, dispatches the gate on the pull request's head and merges "
            "it outside the queue"
        )
    if changed and event != "workflow_dispatch":
        raise DefinitionChangeError(
            f"pull request #{run.pr} changes the gate's own definition ({', '.join(changed)}); it is not gated "
            "automatically, since a green status would vouch for files nobody reviewed. A maintainer reviews the "
            f"change and dispatches the gate (workflow_dispatch, pr {run.pr}, head-sha {run.head_sha}) on the base branch"
        )


def fetch_default_branch(repo: str, *, api_url: str, token: str, polite: bool = True) -> str:
    """The repository's default branch, as GitHub records it (pull_request_target runs its workflow file)."""
    client = _github(api_url, token, polite)
    try:
        found = _ask(f"the repository {repo}", api_url, lambda: client.get_repo(repo).default_branch)
    finally:
        client.close()
    if not isinstance(found, str) or not found:
        raise PublishError(f"the API names no default branch of {repo}: {found!r}")
    return found


def fetch_run(repo: str, run_id: int, *, api_url: str, token: str, polite: bool = True) -> Any:
    """GitHub's record of one workflow run (``GET /repos/{repo}/actions/runs/{id}``), as JSON."""
    client = _github(api_url, token, polite)
    try:
        return _ask(f"workflow run {run_id} of {repo}", api_url,
                    lambda: client.get_repo(repo, lazy=True).get_workflow_run(run_id).raw_data)
    finally:
        client.close()


def check_pinned_head(run: RunPlan, actual: PullHead) -> None:
    """Refuse unless the PR is open and its current head is exactly the pinned commit."""
    if actual.state != "open":
        raise HeadMismatchError(f"pull request #{actual.number} is {actual.state}, not open; refusing to gate it")
    if actual.head_sha != run.head_sha:
        raise HeadMismatchError(
            f"refusing to run: pull request #{actual.number} head is now {actual.head_sha}, not the pinned "
            f"{run.head_sha}; review the new commits and dispatch again with the current head SHA"
        )


def matrix(run: RunPlan) -> dict[str, list[dict[str, Any]]]:
    return {"include": [{"runner": r.name, "labels": list(r.labels), "queue": r.queue, "role": r.role} for r in run.runners]}


def outputs(run: RunPlan) -> dict[str, str]:
    """The step outputs later jobs read (all strings; GitHub outputs have no other type)."""
    return {
        "pr": "" if run.pr is None else str(run.pr),
        "head-sha": run.head_sha,
        "widths": "" if run.widths is None else ",".join(str(q) for q in run.widths),
        "runners": ",".join(r.name for r in run.runners),
        "matrix": json.dumps(matrix(run), separators=(",", ":")),
        "fork": "true" if run.fork else "false",
        "gated": run.gated,
        "queued-pr": "" if run.queued_pr is None else str(run.queued_pr),
    }


def write_outputs(path: Path, values: Mapping[str, str]) -> None:
    """Append ``name=value`` lines to a ``$GITHUB_OUTPUT`` file; values are single-line by construction."""
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            raise Ds4ciError(f"output {key} would span lines; refusing to write an ambiguous $GITHUB_OUTPUT")
    try:
        with path.open("a", encoding="utf-8") as fh:
            for key, value in values.items():
                fh.write(f"{key}={value}\n")
    except OSError as exc:
        raise Ds4ciError(f"cannot append to the step output file {path}: {exc.strerror or exc}") from exc
