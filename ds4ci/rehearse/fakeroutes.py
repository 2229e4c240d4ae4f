"""The fake GitHub's endpoints: one function per endpoint, found by method and path (``route``)."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

from ds4ci.github import commentrecord
from ds4ci.rehearse import fakeshapes as shapes
from ds4ci.rehearse.fakestate import ACTIONS_LOGIN, FakeState, Request

NOT_AN_APP = "You must authenticate via a GitHub App."  # GitHub's answer to a person's token on /check-runs
Handler = Callable[[FakeState, Request, "re.Match[str]"], None]


def _user(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    if not req.may_read_user:
        fake._send(req.h, 403, {"message": "Resource not accessible by integration"})
    else:
        fake._send(req.h, 200, {"login": req.login, "id": 1, "type": "Bot"})


def _repository(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    fake._send(req.h, 200, {"id": 1, "name": fake.repo, "full_name": f"{fake.owner}/{fake.repo}",
                            "owner": {"login": fake.owner}, "url": f"{fake.url}{fake.api}",
                            "default_branch": fake.default_branch})


def _pull(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    n = int(m.group(1))
    pr = fake.pulls.get(n)
    if pr is None:
        fake.not_found(req)
    elif m.group(2):
        fake._page(req.h, req.path, req.query,
                   [{"sha": sha, "url": f"{fake.url}{fake.api}/commits/{sha}"} for sha in pr["commits"]])
    else:
        answers = pr["mergeable"]
        mergeable = answers.pop(0) if len(answers) > 1 else answers[0]
        fake._send(req.h, 200, {"number": n, "url": f"{fake.url}{fake.api}/pulls/{n}", "state": pr["state"],
                                "issue_url": f"{fake.url}{fake.api}/issues/{n}", "draft": pr["draft"],
                                "merged": pr["merged"], "mergeable": mergeable,
                                "mergeable_state": "unknown" if mergeable is None else pr["mergeable_state"],
                                "head": {"sha": pr["head"], "ref": "feature"},
                                "base": {"sha": (fake.branches.get(pr["base"]) or ["0" * 40])[-1], "ref": pr["base"]},
                                "changed_files": len(pr["files"])})


def _pull_files(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    pr = fake.pulls.get(int(m.group(1)))
    if pr is None:
        fake.not_found(req)
        return
    items = [{"filename": f, "status": "modified"} if isinstance(f, str) else
             {"filename": f[0], "previous_filename": f[1], "status": "renamed"} for f in pr["files"]]
    fake._page(req.h, req.path, req.query, items)


def _approvals(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    run_id = int(m.group(1))
    if run_id not in fake._runs:
        fake.not_found(req)
    else:
        fake._send(req.h, 200, fake._approvals.get(run_id, []))


def _run(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    run = fake._runs.get(int(m.group(1)))
    if run is None:
        fake.not_found(req)
        return
    record = {k: v for k, v in run.items() if k != "attempts"}
    fake._send(req.h, 200, {**record, "url": f"{fake.url}{fake.api}/actions/runs/{run['id']}",
                            "conclusion": shapes.run_conclusion(run["attempts"][-1])})


def _run_jobs(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    run = fake._runs.get(int(m.group(1)))
    attempt = int(m.group(2) or 0) or (run["run_attempt"] if run else 0)
    if run is None or not 1 <= attempt <= len(run["attempts"]):
        fake.not_found(req)
    else:
        fake._page(req.h, req.path, req.query, shapes.jobs_json(fake, run, attempt), list_item="jobs")


def _run_artifacts(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    run = fake._runs.get(int(m.group(1)))
    if run is None:
        fake.not_found(req)
    else:
        items = [{"id": 70000 + n, "name": name, "expired": False, "workflow_run": {"id": run["id"]}}
                 for n, name in enumerate(run.get("artifacts", []))]
        fake._page(req.h, req.path, req.query, items, list_item="artifacts")


def _compare_branch(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    """compare BRANCH...SHA: identical (the tip), behind (in the branch's history), ahead (SHA follows the tip in
    another branch's history: a merge queue's branch), else diverged; ``base_commit`` is the branch's tip, and the
    files of ahead/diverged are those ``add_commit_files`` gave SHA (a merge queue's commit: the group's changes)."""
    branch, sha = m.groups()
    if branch not in fake.branches:
        _compare_commits(fake, req, m)
        return
    history = fake.branches[branch]
    tip = {"base_commit": {"sha": history[-1]}}
    known = sha in history or any(sha in p["commits"] for p in fake.pulls.values()) or any(
        r["head_sha"] == sha for r in fake._runs.values()) or any(sha in h for h in fake.branches.values())
    if not known:
        fake.not_found(req)
    elif sha == history[-1]:
        fake._send(req.h, 200, {"status": "identical", "ahead_by": 0, "behind_by": 0, "commits": [], "files": [],
                                **tip})
    elif sha in history:
        behind = len(history) - 1 - history.index(sha)
        fake._send(req.h, 200, {"status": "behind", "ahead_by": 0, "behind_by": behind, "commits": [], "files": [],
                                **tip})
    else:
        files = [{"filename": f, "status": "modified"} for f in fake._commit_files.get(sha, [])]
        ahead = any(sha in h and history[-1] in h[: h.index(sha)] for h in fake.branches.values())
        fake._send(req.h, 200, {"status": "ahead" if ahead else "diverged", "ahead_by": 1, "behind_by": 0 if ahead else 1,
                                "commits": [{"sha": sha}], "files": files, **tip})


def _compare_commits(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    """Commits after base up to head, along some PR's commit list (the fake's history)."""
    base, head = m.groups()
    if not re.fullmatch(r"[0-9a-f]{40}", base):
        fake._send(req.h, 404, {"message": "Not Found", "path": req.path})
        return
    chain = next((p["commits"] for p in fake.pulls.values() if base in p["commits"] and head in p["commits"]), None)
    if chain is None or chain.index(base) > chain.index(head):
        fake.not_found(req)
        return
    between = chain[chain.index(base) + 1: chain.index(head) + 1]
    files = sorted({f for sha in between for f in fake._commit_files.get(sha, [])})
    fake._send(req.h, 200, {"status": "ahead", "ahead_by": len(between), "behind_by": 0,
                            "commits": [{"sha": sha} for sha in between],
                            "files": [{"filename": f, "status": "modified"} for f in files]})


def _reviews(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    n = int(m.group(1))
    if n not in fake.pulls:
        fake.not_found(req)
    else:
        fake._page(req.h, req.path, req.query, [shapes.review_json(fake, n, r) for r in fake._reviews.get(n, [])])


def _check_runs_of(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    runs = [r for r in fake._check_runs if r["sha"] == m.group(1)]
    if "check_name" in req.query:
        runs = [r for r in runs if r["name"] == req.query["check_name"][0]]
    if "app_id" in req.query:
        runs = [r for r in runs if str(shapes.app_id(r["app"])) == req.query["app_id"][0]]
    if req.query.get("filter", ["latest"])[0] == "latest":
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for r in runs:
            latest[(r["name"], r["app"])] = r
        runs = list(latest.values())
    runs = sorted(runs, key=lambda r: -int(r["id"]))  # newest first, as GitHub lists them
    fake._page(req.h, req.path, req.query, [shapes.check_run_json(fake, r) for r in runs], list_item="check_runs")


def _create_check_run(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    app = req.login[: -len("[bot]")] if req.login.endswith("[bot]") else None
    problem = shapes.check_run_problem(req.payload, creating=True)
    if app is None:
        fake._send(req.h, 403, {"message": NOT_AN_APP, "documentation_url": "https://docs.github.com/rest"})
    elif problem is not None:
        fake._send(req.h, 422, {"message": "Validation Failed", "errors": [problem]})
    else:
        run = {"id": fake._new_id(), "sha": req.payload["head_sha"], "name": req.payload["name"], "status": "queued",
               "conclusion": None, "app": app, "output": {"title": None, "summary": None, "text": None},
               "annotations": [], "details_url": None, "external_id": ""}
        shapes.store_check_run(run, req.payload)
        fake._check_runs.append(run)
        fake._send(req.h, 201, shapes.check_run_json(fake, run))


def _check_run(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    run = next((r for r in fake._check_runs if r["id"] == int(m.group(1))), None)
    if run is None:
        fake.not_found(req)
    elif req.method == "GET":
        fake._send(req.h, 200, shapes.check_run_json(fake, run))
    elif f"{run['app']}[bot]" != req.login:
        fake._send(req.h, 403, {"message": "Invalid app_id `1` - check run can only be modified by the GitHub App "
                                           "that created it."})
    elif (problem := shapes.check_run_problem(req.payload, creating=False)) is not None:
        fake._send(req.h, 422, {"message": "Validation Failed", "errors": [problem]})
    else:
        shapes.store_check_run(run, req.payload)
        fake._send(req.h, 200, shapes.check_run_json(fake, run))


def _issue_comments(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    n = int(m.group(1))
    if n not in fake.pulls:
        fake.not_found(req)
    elif req.method == "GET":
        items = sorted((c for c in fake._comments.values() if c["pr"] == n), key=lambda c: c["id"])
        since = req.query.get("since", [""])[0]  # GitHub: only comments updated at or after this time
        items = [c for c in items if not since or c["updated_at"] >= since]
        fake._page(req.h, req.path, req.query, [shapes.comment_json(fake, c) for c in items])
    elif req.method == "POST":
        if shapes.body_problem(req.payload):
            fake._send(req.h, 422, {"message": "Validation Failed", "errors": [{"field": "body"}]})
            return
        made = fake._new_comment(n, req.payload["body"], req.login)
        _record(fake, req, made)
        fake._send(req.h, 201, shapes.comment_json(fake, made))


def _record(fake: FakeState, req: Request, comment: dict[str, Any]) -> None:
    """A write by the publishing job's token: its run gets the artifact gate.yml's step after publish uploads."""
    if fake.publishing_run is not None and req.login == ACTIONS_LOGIN and fake.publishing_run in fake._runs:
        name = commentrecord.artifact_name(comment["id"], comment["body"])
        fake._runs[fake.publishing_run].setdefault("artifacts", []).append(name)


def _comment(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    comment = fake._comments.get(int(m.group(1)))
    if comment is None:
        fake.not_found(req)
    elif comment["login"] != req.login and req.method != "GET":
        fake._send(req.h, 403, {"message": "Must have admin rights to Repository."})
    elif req.method == "PATCH":
        if shapes.body_problem(req.payload):
            fake._send(req.h, 422, {"message": "Validation Failed", "errors": [{"field": "body"}]})
            return
        comment["body"] = req.payload["body"]
        comment["updated_at"] = fake._tick()
        _record(fake, req, comment)
        fake._send(req.h, 200, shapes.comment_json(fake, comment))
    elif req.method == "DELETE":
        del fake._comments[comment["id"]]
        fake._send(req.h, 204)
    else:
        fake._send(req.h, 200, shapes.comment_json(fake, comment))


def _create_status(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    desc = req.payload.get("description")
    if req.payload.get("state") not in shapes.STATES:
        fake._send(req.h, 422, {"message": "Validation Failed", "errors": [{"field": "state", "code": "invalid"}]})
    elif desc is not None and (not isinstance(desc, str) or len(desc) > 140):
        fake._send(req.h, 422, {"message": "Validation Failed",
                                "errors": [{"field": "description", "code": "custom",
                                            "message": "description is too long (maximum is 140 characters)"}]})
    else:
        fake._send(req.h, 201, shapes.status_json(fake, fake._new_status(m.group(1), req.payload, req.login)))


def _statuses(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    sha = m.group(1)
    mine = [s for s in fake._statuses if s["sha"] == sha]
    if m.group(2) == "statuses":
        fake._page(req.h, req.path, req.query, [shapes.status_json(fake, s) for s in reversed(mine)])
        return
    latest: dict[str, dict[str, Any]] = {}
    for s in mine:
        latest[s["context"]] = s
    states = {s["state"] for s in latest.values()}
    overall = ("failure" if states & {"failure", "error"} else "pending" if "pending" in states or not states
               else "success")
    # GitHub's combined status lists simple statuses: no creator (who posted it is not said).
    simple = [{k: v for k, v in shapes.status_json(fake, s).items() if k != "creator"} for s in latest.values()]
    fake._page(req.h, req.path, req.query, simple, list_item="statuses", extra={"state": overall, "sha": sha})


def _graphql(fake: FakeState, req: Request, m: re.Match[str]) -> None:
    """Just the reviewThreads query: repository(owner, name).pullRequest(number).reviewThreads(first, after)."""
    query, variables = req.payload.get("query"), req.payload.get("variables") or {}
    fake.graphql_queries.append({"query": query, "variables": dict(variables)})
    if fake.on_graphql is not None:
        fake.on_graphql(fake)
    if not isinstance(query, str) or "reviewThreads" not in query:
        fake._send(req.h, 200, {"errors": [{"message": "fake: only the reviewThreads query is served"}]})
        return
    if (variables.get("owner"), variables.get("name")) != (fake.owner, fake.repo):
        full = f"{variables.get('owner')}/{variables.get('name')}"
        fake._send(req.h, 200, {"data": {"repository": None}, "errors": [
            {"type": "NOT_FOUND", "path": ["repository"],
             "message": f"Could not resolve to a Repository with the name '{full}'."}]})
        return
    number = variables.get("number")
    if number not in fake.pulls:
        fake._send(req.h, 200, {"data": {"repository": {"pullRequest": None}}, "errors": [
            {"type": "NOT_FOUND", "path": ["repository", "pullRequest"],
             "message": f"Could not resolve to a PullRequest with the number of {number}."}]})
        return
    _review_threads(fake, req, query, variables.get("cursor"), fake._threads.get(number, []))


def _review_threads(fake: FakeState, req: Request, query: str, cursor: Any, threads: list[dict[str, Any]]) -> None:
    first = re.search(r"reviewThreads\(first:\s*(\d+)", query)
    size = min(int(first.group(1)) if first else 100, fake.graphql_page_size)
    start = 0
    if cursor is not None:
        try:
            start = int(base64.b64decode(cursor).decode().rsplit(":", 1)[1])
        except (ValueError, IndexError):
            fake._send(req.h, 200, {"errors": [{"message": f"`{cursor}` does not appear to be a valid cursor."}]})
            return
    chunk = threads[start: start + size]
    end = start + len(chunk)
    info = {"hasNextPage": end < len(threads),
            "endCursor": base64.b64encode(f"cursor:v2:{end}".encode()).decode() if chunk else None}
    fake._send(req.h, 200, {"data": {"repository": {"pullRequest": {"reviewThreads": {"pageInfo": info, "nodes": chunk}}}}})


# (methods, path pattern, endpoint), tried in order; "{repo}" stands for /repos/OWNER/NAME.
ROUTES: tuple[tuple[frozenset[str], str, Handler], ...] = (
    (frozenset({"POST"}), "/graphql", _graphql),
    (frozenset({"GET"}), "/user", _user),
    (frozenset({"GET"}), "{repo}", _repository),
    (frozenset({"GET"}), r"{repo}/pulls/(\d+)(/commits)?", _pull),
    (frozenset({"GET"}), r"{repo}/pulls/(\d+)/files", _pull_files),
    (frozenset({"GET"}), r"{repo}/actions/runs/(\d+)/approvals", _approvals),
    (frozenset({"GET"}), r"{repo}/actions/runs/(\d+)", _run),
    (frozenset({"GET"}), r"{repo}/actions/runs/(\d+)(?:/attempts/(\d+))?/jobs", _run_jobs),
    (frozenset({"GET"}), r"{repo}/actions/runs/(\d+)/artifacts", _run_artifacts),
    (frozenset({"GET"}), r"{repo}/compare/([A-Za-z0-9_./-]+?)\.\.\.([0-9a-f]{40})", _compare_branch),
    (frozenset({"GET"}), r"{repo}/pulls/(\d+)/reviews", _reviews),
    (frozenset({"GET"}), r"{repo}/commits/([0-9a-f]{40})/check-runs", _check_runs_of),
    (frozenset({"POST"}), "{repo}/check-runs", _create_check_run),
    (frozenset({"GET", "PATCH"}), r"{repo}/check-runs/(\d+)", _check_run),
    (frozenset({"GET", "POST", "PATCH", "DELETE"}), r"{repo}/issues/(\d+)/comments", _issue_comments),
    (frozenset({"GET", "POST", "PATCH", "DELETE"}), r"{repo}/issues/comments/(\d+)", _comment),
    (frozenset({"POST"}), r"{repo}/statuses/([0-9a-f]{40})", _create_status),
    (frozenset({"GET"}), r"{repo}/commits/([0-9a-f]{40})/(statuses|status)", _statuses),
)


def route(fake: FakeState, req: Request) -> None:
    """Answer ``req`` from the first endpoint whose method and path match, else GitHub's 404."""
    repo = re.escape(fake.api)
    for methods, pattern, handler in ROUTES:
        m = re.fullmatch(pattern.replace("{repo}", repo), req.path)
        if m and req.method in methods:
            handler(fake, req, m)
            return
    fake._send(req.h, 404, {"message": "Not Found", "path": req.path})
