"""A stateful fake of the GitHub REST endpoints ds4ci uses, served on 127.0.0.1.

PyGithub talks to it over real HTTP. It keeps comments, statuses and pull requests in memory,
paginates with Link headers like GitHub, validates statuses like GitHub (422), knows a write
token, a read-only token ("Resource not accessible by integration") and an App-style token
that cannot read /user, and can inject faults into the next requests. Tests assert on the
resulting state (``comments()``, ``statuses()``); ``requests`` is the log for counting.

Statuses carry ``creator.login`` (who posted them: the token's login, or ``add_status(creator=)``)
in the list of a commit's statuses, and not in the combined status, as on GitHub; check runs carry
``app.slug``. Check runs are created (``POST /check-runs``) only by a GitHub App's token (the
``[bot]`` logins; a person's token gets GitHub's 403), updated by id only by the app that made them,
validated like GitHub (conclusion and status values, 65,535-character summary and text, at most 50
annotations per request, each with a path and lines), and listed for a ref with ``check_name``,
``app_id`` and ``filter`` (latest per name and app, or all); ``check_runs()`` returns them as stored.
For merge gating it also serves the combined status of a commit, a pull
request's reviews, its draft/mergeable/state fields (``mergeable`` may answer null a few times
first, as GitHub does while it computes it), and ``POST /graphql`` answering the
``reviewThreads`` query with cursor pagination (``graphql_page_size`` threads per page).
Shapes follow GitHub's OpenAPI description (@octokit/openapi) and GraphQL schema.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

WRITE_TOKEN = "ghs_fake_write_token_0123456789abcdefghijklmnopqrstuvwxyz"
READ_TOKEN = "ghs_fake_read_only_token_0123456789abcdefghijklmnopqrstuvw"
APP_TOKEN = "ghs_fake_app_installation_token_0123456789abcdefghijklmnop"
BOT_LOGIN = "ds4ci-bot"
ACTIONS_LOGIN = "github-actions[bot]"  # who a workflow's GITHUB_TOKEN posts as
STATES = {"error", "failure", "pending", "success"}
CONCLUSIONS = {"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}
CHECK_STATUSES = {"queued", "in_progress", "completed", "waiting", "requested", "pending"}
APP_IDS = {"github-actions": 15368}  # app.id of the apps the fake knows; others get one from their slug
NOT_AN_APP = "You must authenticate via a GitHub App."  # GitHub's answer to a person's token on /check-runs


def _app_id(slug: str) -> int:
    return APP_IDS.get(slug, 100000 + sum(map(ord, slug)))


@dataclass
class Fault:
    status: int
    count: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "Server Error"
    methods: frozenset[str] | None = None
    path_contains: str = ""  # only requests whose path contains this


# add_status's default link: a run of the trusted gate made for the commit (what the publisher posts).
TRUSTED_RUN = "trusted-run"
MAIN_TIP = "ba5e" * 10  # the tip of the fake's base branch "main" (a pull_request_target run's head_sha)


class FakeGitHub:
    def __init__(self, owner: str = "acme", repo: str = "engine") -> None:
        self.owner = owner
        self.repo = repo
        self.lock = threading.Lock()
        self.tokens: dict[str, tuple[str, bool, bool]] = {
            # token -> (login, may write, may read /user)
            WRITE_TOKEN: (BOT_LOGIN, True, True),
            READ_TOKEN: (BOT_LOGIN, False, True),
            APP_TOKEN: (ACTIONS_LOGIN, True, False),
        }
        self.pulls: dict[int, dict[str, Any]] = {}
        self._comments: dict[int, dict[str, Any]] = {}
        self._statuses: list[dict[str, Any]] = []
        self._check_runs: list[dict[str, Any]] = []
        self._reviews: dict[int, list[dict[str, Any]]] = {}
        self._threads: dict[int, list[dict[str, Any]]] = {}
        self._commit_files: dict[str, list[str]] = {}  # sha -> files that commit changed (for compare)
        self._runs: dict[int, dict[str, Any]] = {}  # workflow run id -> GitHub's record of it
        self._approvals: dict[int, list[dict[str, Any]]] = {}  # workflow run id -> its environment reviews
        # branch -> its history, oldest first (compare BRANCH...SHA answers identical / behind / diverged)
        self.branches: dict[str, list[str]] = {"main": [MAIN_TIP]}
        self.graphql_page_size = 100
        self.graphql_queries: list[dict[str, Any]] = []
        # Called (under the lock: mutate state directly) on every GraphQL query, e.g. to push mid-check.
        self.on_graphql: Callable[[FakeGitHub], None] | None = None
        self._next_id = 1000
        self._clock = 0
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                fake._dispatch(self)

            do_GET = do_POST = do_PATCH = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ----- state set-up and accessors -------------------------------------------------------
    def add_pull(self, number: int, head: str, commits: list[str] | None = None, *, state: str = "open",
                 draft: bool = False, merged: bool = False, mergeable: bool | None = True,
                 mergeable_state: str = "clean") -> None:
        with self.lock:
            self.pulls[number] = {"head": head, "commits": list(commits or [head]), "state": state, "draft": draft,
                                  "merged": merged, "mergeable": [mergeable], "mergeable_state": mergeable_state,
                                  "files": []}

    def set_pull_files(self, number: int, files: list[str | tuple[str, str]]) -> None:
        """What ``GET /pulls/{n}/files`` lists: a path, or (new, old) for a rename."""
        with self.lock:
            self.pulls[number]["files"] = list(files)

    def add_run(self, run_id: int, *, path: str = ".github/workflows/gate.yml", event: str = "pull_request_target",
                head_branch: str = "main", title: str = "", repo: str | None = None, head_sha: str | None = None,
                jobs: dict[str, str] | None = None) -> str:
        """A workflow run as GitHub records it; returns its html URL (what a status's target_url names).

        ``head_sha``: the commit the run's workflow file came from (default: the tip of ``head_branch``, as for a
        pull_request_target run, which runs on the base branch). ``jobs``: job name -> conclusion of attempt 1."""
        full = repo or f"{self.owner}/{self.repo}"
        with self.lock:
            sha = head_sha or (self.branches.get(head_branch) or [MAIN_TIP])[-1]
            self._runs[run_id] = {"id": run_id, "path": path, "event": event, "head_branch": head_branch,
                                  "head_sha": sha, "display_title": title, "repository": {"full_name": full},
                                  "html_url": f"https://github.com/{full}/actions/runs/{run_id}",
                                  "run_attempt": 1, "run_started_at": self._tick(), "status": "completed",
                                  "check_suite_id": 50000 + run_id, "attempts": [dict(jobs or {})]}
        return f"https://github.com/{full}/actions/runs/{run_id}"

    def add_attempt(self, run_id: int, jobs: dict[str, str]) -> None:
        """A re-run of every job of ``run_id``: a new attempt (run_attempt + 1) whose jobs concluded ``jobs``."""
        with self.lock:
            run = self._runs[run_id]
            run["attempts"].append(dict(jobs))
            run["run_attempt"] = len(run["attempts"])
            run["run_started_at"] = self._tick()

    def add_branch(self, name: str, commits: list[str]) -> None:
        """A branch and its history (oldest first); its last commit is the tip."""
        with self.lock:
            self.branches[name] = list(commits)

    def add_run_review(self, run_id: int, environment: str, state: str = "approved", login: str = "maintainer") -> None:
        """A review of a run's environment, as ``GET /actions/runs/{id}/approvals`` lists it."""
        with self.lock:
            self._approvals.setdefault(run_id, []).append(
                {"state": state, "comment": "", "user": {"login": login},
                 "environments": [{"id": 1, "name": environment}]})

    def set_mergeable(self, number: int, *answers: bool | None) -> None:
        """Successive reads of the PR answer these values; the last one then sticks."""
        with self.lock:
            self.pulls[number]["mergeable"] = list(answers)

    def move_head(self, number: int, sha: str) -> None:
        """A push to the PR: the new head becomes the newest commit."""
        with self.lock:
            self.pulls[number]["head"] = sha
            self.pulls[number]["commits"].append(sha)

    def add_check_run(self, sha: str, name: str, status: str = "completed", conclusion: str | None = "success",
                      app: str = "github-actions", title: str | None = None, details_url: str | None = None) -> int:
        with self.lock:
            self._next_id += 1
            self._check_runs.append({"id": self._next_id, "sha": sha, "name": name, "status": status,
                                     "conclusion": conclusion if status == "completed" else None, "app": app,
                                     "output": {"title": title, "summary": None, "text": None}, "annotations": [],
                                     "details_url": details_url, "external_id": ""})
            return self._next_id

    def check_runs(self, sha: str | None = None) -> list[dict[str, Any]]:
        """Every check run as stored (oldest first), with its ``output`` and every ``annotations`` item."""
        with self.lock:
            return [json.loads(json.dumps(r)) for r in self._check_runs if sha is None or r["sha"] == sha]

    def add_review(self, number: int, login: str, state: str, commit_id: str | None,
                   association: str = "MEMBER") -> None:
        with self.lock:
            self._next_id += 1
            self._reviews.setdefault(number, []).append(
                {"id": self._next_id, "login": login, "state": state, "commit_id": commit_id,
                 "association": association, "submitted_at": self._tick()})

    def add_thread(self, number: int, path: str, line: int | None, *, resolved: bool = False,
                   outdated: bool = False, original_line: int | None = None) -> None:
        with self.lock:
            self._threads.setdefault(number, []).append(
                {"isResolved": resolved, "isOutdated": outdated, "path": path, "line": line,
                 "originalLine": original_line if original_line is not None else line})

    def add_comment(self, number: int, body: str, login: str = "someone") -> int:
        with self.lock:
            return self._new_comment(number, body, login)["id"]

    def add_commit_files(self, sha: str, files: list[str]) -> None:
        with self.lock:
            self._commit_files[sha] = list(files)

    def add_status(self, sha: str, context: str, state: str, description: str = "",
                   creator: str = ACTIONS_LOGIN, target_url: str | None = TRUSTED_RUN) -> None:
        """A status posted by ``creator`` (GitHub records it as the status's ``creator.login``).

        ``target_url`` TRUSTED_RUN (the default, as the trusted gate's publisher posts it): the URL of a new run of
        the trusted gate.yml (pull_request_target, titled with ``sha``); None: no link; else that link."""
        if target_url is TRUSTED_RUN:
            with self.lock:
                self._next_id += 1
                run_id = self._next_id
            runner = context.removeprefix("ds4ci/") if context.startswith("ds4ci/") else None
            verdict = {"success": "success", "pending": "in_progress"}.get(state, "failure")
            jobs = {f"verdict {runner}": verdict} if runner else {}
            target_url = self.add_run(run_id, title=f"ds4ci gate {sha}", jobs=jobs)
        with self.lock:
            self._new_status(
                sha, {"state": state, "context": context, "description": description, "target_url": target_url}, creator
            )

    def inject(self, status: int, count: int = 1, *, headers: dict[str, str] | None = None,
               message: str = "Server Error", methods: set[str] | None = None, path_contains: str = "") -> None:
        with self.lock:
            self.faults.append(Fault(status, count, dict(headers or {}), message,
                                     frozenset(methods) if methods else None, path_contains))

    def comments(self, number: int | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(c) for c in self._comments.values() if number is None or c["pr"] == number]

    def statuses(self, sha: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(s) for s in self._statuses if sha is None or s["sha"] == sha]

    def latest_states(self, sha: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for s in self.statuses(sha):
            out[s["context"]] = s["state"]
        return out

    def count(self, method: str | None = None, path_contains: str = "") -> int:
        with self.lock:
            return sum(1 for m, p in self.requests if (method is None or m == method) and path_contains in p)

    # ----- internals ------------------------------------------------------------------------
    def _tick(self) -> str:
        self._clock += 1
        return f"2026-11-29T12:{self._clock // 60 % 60:02d}:{self._clock % 60:02d}Z"

    def _new_comment(self, number: int, body: str, login: str) -> dict[str, Any]:
        self._next_id += 1
        cid = self._next_id
        now = self._tick()
        comment = {"id": cid, "pr": number, "body": body, "login": login, "created_at": now, "updated_at": now}
        self._comments[cid] = comment
        return comment

    def _new_status(self, sha: str, payload: dict[str, Any], login: str) -> dict[str, Any]:
        self._next_id += 1
        status = {"id": self._next_id, "sha": sha, "state": payload["state"], "context": payload.get("context", "default"),
                  "description": payload.get("description"), "target_url": payload.get("target_url"),
                  "creator": login, "created_at": self._tick()}
        self._statuses.append(status)
        return status

    @staticmethod
    def _run_conclusion(jobs: dict[str, str]) -> str:
        return "success" if all(c in ("success", "skipped") for c in jobs.values()) else "failure"

    def _jobs_json(self, run: dict[str, Any], attempt: int) -> list[dict[str, Any]]:
        """The jobs of one attempt, as ``GET /actions/runs/{id}/attempts/{n}/jobs`` lists them."""
        base = f"{self.url}/repos/{self.owner}/{self.repo}"
        out = []
        for i, (name, conclusion) in enumerate(run["attempts"][attempt - 1].items()):
            job_id = run["id"] * 1000 + attempt * 100 + i
            done = conclusion not in ("queued", "in_progress")
            out.append({"id": job_id, "run_id": run["id"], "run_attempt": attempt, "name": name,
                        "status": "completed" if done else conclusion, "conclusion": conclusion if done else None,
                        "head_sha": run["head_sha"], "head_branch": run["head_branch"],
                        "workflow_name": "ds4ci gate", "check_run_url": f"{base}/check-runs/{job_id}",
                        "html_url": f"https://github.com/{self.owner}/{self.repo}/actions/runs/{run['id']}/job/{job_id}"})
        return out

    def _compare_branch(self, h: BaseHTTPRequestHandler, branch: str, sha: str) -> None:
        """compare BRANCH...SHA: identical (the tip), behind (in the branch's history), else diverged."""
        history = self.branches[branch]
        known = sha in history or any(sha in p["commits"] for p in self.pulls.values()) or any(
            r["head_sha"] == sha for r in self._runs.values())
        if not known:
            self._send(h, 404, {"message": "Not Found"})
        elif sha == history[-1]:
            self._send(h, 200, {"status": "identical", "ahead_by": 0, "behind_by": 0, "commits": [], "files": []})
        elif sha in history:
            behind = len(history) - 1 - history.index(sha)
            self._send(h, 200, {"status": "behind", "ahead_by": 0, "behind_by": behind, "commits": [], "files": []})
        else:
            self._send(h, 200, {"status": "diverged", "ahead_by": 1, "behind_by": 1, "commits": [{"sha": sha}],
                                "files": []})

    def _comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        base = f"{self.url}/repos/{self.owner}/{self.repo}"
        return {"id": c["id"], "node_id": f"IC_{c['id']}", "url": f"{base}/issues/comments/{c['id']}",
                "html_url": f"https://github.invalid/{self.owner}/{self.repo}/pull/{c['pr']}#issuecomment-{c['id']}",
                "issue_url": f"{base}/issues/{c['pr']}", "body": c["body"],
                "user": {"login": c["login"], "id": 1, "type": "Bot"},
                "created_at": c["created_at"], "updated_at": c["updated_at"], "author_association": "NONE"}

    def _status_json(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"id": s["id"], "url": f"{self.url}/repos/{self.owner}/{self.repo}/statuses/{s['sha']}",
                "state": s["state"], "context": s["context"], "description": s["description"],
                "target_url": s["target_url"], "creator": {"login": s["creator"], "id": 1},
                "created_at": s["created_at"], "updated_at": s["created_at"]}

    def _review_json(self, n: int, r: dict[str, Any]) -> dict[str, Any]:
        base = f"{self.url}/repos/{self.owner}/{self.repo}"
        return {"id": r["id"], "node_id": f"PRR_{r['id']}", "user": {"login": r["login"], "id": 2, "type": "User"},
                "body": "", "state": r["state"], "html_url": f"https://github.invalid/{self.owner}/{self.repo}/pull/{n}",
                "pull_request_url": f"{base}/pulls/{n}", "_links": {}, "submitted_at": r["submitted_at"],
                "commit_id": r["commit_id"], "author_association": r["association"]}

    def _check_run_json(self, r: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.url}/repos/{self.owner}/{self.repo}/check-runs/{r['id']}"
        out = r.get("output") or {}
        return {"id": r["id"], "name": r["name"], "head_sha": r["sha"], "status": r["status"],
                "conclusion": r["conclusion"], "node_id": f"CR_{r['id']}", "external_id": r.get("external_id", ""),
                "url": url, "html_url": f"https://github.invalid/{self.owner}/{self.repo}/runs/{r['id']}",
                "details_url": r.get("details_url"), "started_at": "2026-11-29T12:00:00Z",
                "completed_at": "2026-11-29T12:05:00Z" if r["status"] == "completed" else None,
                "output": {"title": out.get("title"), "summary": out.get("summary"), "text": out.get("text"),
                           "annotations_count": len(r.get("annotations", [])), "annotations_url": f"{url}/annotations"},
                "check_suite": {"id": 1}, "pull_requests": [],
                "app": {"id": _app_id(r["app"]), "slug": r["app"], "name": r["app"], "node_id": f"A_{r['app']}",
                        "owner": None, "description": None, "external_url": "https://github.invalid",
                        "html_url": f"https://github.invalid/apps/{r['app']}", "created_at": "2026-01-01T00:00:00Z",
                        "updated_at": "2026-01-01T00:00:00Z", "permissions": {}, "events": []}}

    def _check_run_problem(self, payload: dict[str, Any], creating: bool) -> str | None:
        """What GitHub's validation (422) would refuse in a create or update body, or None."""
        if creating and (not isinstance(payload.get("name"), str) or not payload["name"]):
            return "name is missing"
        if creating and not re.fullmatch(r"[0-9a-f]{40}", str(payload.get("head_sha", ""))):
            return "head_sha is not a commit"
        status = payload.get("status", "queued")
        conclusion = payload.get("conclusion")
        if status not in CHECK_STATUSES:
            return f"status {status!r} is not valid"
        if conclusion is not None and conclusion not in CONCLUSIONS:
            return f"conclusion {conclusion!r} is not valid"
        if status == "completed" and conclusion is None:
            return "conclusion is required when status is completed"
        output = payload.get("output")
        if output is None:
            return None
        if not isinstance(output, dict) or not isinstance(output.get("title"), str) or not isinstance(
                output.get("summary"), str):
            return "output needs a title and a summary"
        for key in ("summary", "text"):
            if len(output.get(key) or "") > 65535:
                return f"output.{key} is longer than 65535 characters"
        notes = output.get("annotations") or []
        if len(notes) > 50:
            return "only 50 annotations are allowed per request"
        for note in notes:
            if not (isinstance(note, dict) and isinstance(note.get("path"), str) and note["path"]
                    and isinstance(note.get("start_line"), int) and isinstance(note.get("end_line"), int)
                    and note.get("annotation_level") in ("notice", "warning", "failure")
                    and isinstance(note.get("message"), str)):
                return f"annotation {note!r:.200} needs path, start_line, end_line, annotation_level and message"
        return None

    def _store_check_run(self, run: dict[str, Any], payload: dict[str, Any]) -> None:
        for key in ("status", "conclusion", "details_url", "external_id"):
            if key in payload:
                run[key] = payload[key]
        if run["status"] != "completed":
            run["conclusion"] = None
        if "output" in payload:
            output = payload["output"]
            run["output"] = {"title": output.get("title"), "summary": output.get("summary"), "text": output.get("text")}
            run.setdefault("annotations", []).extend(output.get("annotations") or [])  # GitHub appends them

    def _graphql(self, h: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        """Just the reviewThreads query: repository(owner, name).pullRequest(number).reviewThreads(first, after)."""
        query, variables = payload.get("query"), payload.get("variables") or {}
        self.graphql_queries.append({"query": query, "variables": dict(variables)})
        if self.on_graphql is not None:
            self.on_graphql(self)
        if not isinstance(query, str) or "reviewThreads" not in query:
            self._send(h, 200, {"errors": [{"message": "fake: only the reviewThreads query is served"}]})
            return
        if (variables.get("owner"), variables.get("name")) != (self.owner, self.repo):
            full = f"{variables.get('owner')}/{variables.get('name')}"
            self._send(h, 200, {"data": {"repository": None}, "errors": [
                {"type": "NOT_FOUND", "path": ["repository"],
                 "message": f"Could not resolve to a Repository with the name '{full}'."}]})
            return
        number = variables.get("number")
        if number not in self.pulls:
            self._send(h, 200, {"data": {"repository": {"pullRequest": None}}, "errors": [
                {"type": "NOT_FOUND", "path": ["repository", "pullRequest"],
                 "message": f"Could not resolve to a PullRequest with the number of {number}."}]})
            return
        first = re.search(r"reviewThreads\(first:\s*(\d+)", query)
        size = min(int(first.group(1)) if first else 100, self.graphql_page_size)
        cursor = variables.get("cursor")
        start = 0
        if cursor is not None:
            try:
                start = int(base64.b64decode(cursor).decode().rsplit(":", 1)[1])
            except (ValueError, IndexError):
                self._send(h, 200, {"errors": [{"message": f"`{cursor}` does not appear to be a valid cursor."}]})
                return
        threads = self._threads.get(number, [])
        chunk = threads[start: start + size]
        end = start + len(chunk)
        info = {"hasNextPage": end < len(threads),
                "endCursor": base64.b64encode(f"cursor:v2:{end}".encode()).decode() if chunk else None}
        self._send(h, 200, {"data": {"repository": {"pullRequest": {"reviewThreads": {"pageInfo": info, "nodes": chunk}}}}})

    def _send(self, h: BaseHTTPRequestHandler, status: int, data: Any = None,
              headers: dict[str, str] | None = None) -> None:
        body = b"" if data is None else json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(body)))
        h.send_header("x-ratelimit-remaining", "4999")
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(body)

    def _page(self, h: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]], items: list[Any],
              list_item: str | None = None, extra: dict[str, Any] | None = None) -> None:
        """One page of ``items``; with ``list_item`` wrapped as GitHub does: {total_count, <list_item>: [...]}."""
        per_page = max(1, min(int(query.get("per_page", ["30"])[0]), 100))
        page = max(1, int(query.get("page", ["1"])[0]))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        links = []
        if page < last:
            links.append(f'<{self.url}{path}?per_page={per_page}&page={page + 1}>; rel="next"')
            links.append(f'<{self.url}{path}?per_page={per_page}&page={last}>; rel="last"')
        if page > 1:
            links.append(f'<{self.url}{path}?per_page={per_page}&page=1>; rel="first"')
            links.append(f'<{self.url}{path}?per_page={per_page}&page={page - 1}>; rel="prev"')
        body: Any = chunk if list_item is None else {**(extra or {}), "total_count": len(items), list_item: chunk}
        self._send(h, 200, body, {"Link": ", ".join(links)} if links else None)

    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        method = h.command
        split = urlsplit(h.path)
        path, query = split.path, parse_qs(split.query)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((method, path))
            for fault in self.faults:
                if fault.count > 0 and (fault.methods is None or method in fault.methods) and (
                        fault.path_contains in path):
                    fault.count -= 1
                    self._send(h, fault.status, {"message": fault.message}, fault.headers)
                    return
        auth = h.headers.get("Authorization", "")
        token = auth.split(" ", 1)[1] if " " in auth else ""
        if token not in self.tokens:
            self._send(h, 401, {"message": "Bad credentials"})
            return
        login, may_write, may_read_user = self.tokens[token]
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            self._send(h, 400, {"message": "Problems parsing JSON"})
            return
        if method in ("POST", "PATCH", "DELETE") and not may_write and path != "/graphql":
            self._send(h, 403, {"message": "Resource not accessible by integration",
                                "documentation_url": "https://docs.github.com/rest"})
            return
        with self.lock:
            self._route(h, method, path, query, payload, login, may_read_user)

    def _route(self, h: BaseHTTPRequestHandler, method: str, path: str, query: dict[str, list[str]],
               payload: dict[str, Any], login: str, may_read_user: bool) -> None:
        repo = f"/repos/{self.owner}/{self.repo}"
        if path == "/graphql" and method == "POST":
            self._graphql(h, payload)
            return
        if path == "/user" and method == "GET":
            if not may_read_user:
                self._send(h, 403, {"message": "Resource not accessible by integration"})
            else:
                self._send(h, 200, {"login": login, "id": 1, "type": "Bot"})
            return
        if path == repo and method == "GET":
            self._send(h, 200, {"id": 1, "name": self.repo, "full_name": f"{self.owner}/{self.repo}",
                                "owner": {"login": self.owner}, "url": f"{self.url}{repo}"})
            return
        m = re.fullmatch(re.escape(repo) + r"/pulls/(\d+)(/commits)?", path)
        if m and method == "GET":
            pr = self.pulls.get(int(m.group(1)))
            if pr is None:
                self._send(h, 404, {"message": "Not Found"})
            elif m.group(2):
                self._page(h, path, query, [{"sha": sha, "url": f"{self.url}{repo}/commits/{sha}"} for sha in pr["commits"]])
            else:
                n = int(m.group(1))
                answers = pr["mergeable"]
                mergeable = answers.pop(0) if len(answers) > 1 else answers[0]
                self._send(h, 200, {"number": n, "url": f"{self.url}{repo}/pulls/{n}", "state": pr["state"],
                                    "issue_url": f"{self.url}{repo}/issues/{n}", "draft": pr["draft"],
                                    "merged": pr["merged"], "mergeable": mergeable,
                                    "mergeable_state": "unknown" if mergeable is None else pr["mergeable_state"],
                                    "head": {"sha": pr["head"], "ref": "feature"}, "base": {"sha": "0" * 40, "ref": "main"},
                                    "changed_files": len(pr["files"])})
            return
        m = re.fullmatch(re.escape(repo) + r"/pulls/(\d+)/files", path)
        if m and method == "GET":
            pr = self.pulls.get(int(m.group(1)))
            if pr is None:
                self._send(h, 404, {"message": "Not Found"})
            else:
                items = [{"filename": f, "status": "modified"} if isinstance(f, str) else
                         {"filename": f[0], "previous_filename": f[1], "status": "renamed"} for f in pr["files"]]
                self._page(h, path, query, items)
            return
        m = re.fullmatch(re.escape(repo) + r"/actions/runs/(\d+)/approvals", path)
        if m and method == "GET":
            run_id = int(m.group(1))
            if run_id not in self._runs:
                self._send(h, 404, {"message": "Not Found"})
            else:
                self._send(h, 200, self._approvals.get(run_id, []))
            return
        m = re.fullmatch(re.escape(repo) + r"/actions/runs/(\d+)", path)
        if m and method == "GET":
            run = self._runs.get(int(m.group(1)))
            if run is None:
                self._send(h, 404, {"message": "Not Found"})
            else:
                record = {k: v for k, v in run.items() if k != "attempts"}
                self._send(h, 200, {**record, "url": f"{self.url}{repo}/actions/runs/{run['id']}",
                                    "conclusion": self._run_conclusion(run["attempts"][-1])})
            return
        m = re.fullmatch(re.escape(repo) + r"/actions/runs/(\d+)(?:/attempts/(\d+))?/jobs", path)
        if m and method == "GET":
            run = self._runs.get(int(m.group(1)))
            attempt = int(m.group(2) or 0) or (run["run_attempt"] if run else 0)
            if run is None or not 1 <= attempt <= len(run["attempts"]):
                self._send(h, 404, {"message": "Not Found"})
            else:
                self._page(h, path, query, self._jobs_json(run, attempt), list_item="jobs")
            return
        m = re.fullmatch(re.escape(repo) + r"/compare/([A-Za-z0-9_./-]+?)\.\.\.([0-9a-f]{40})", path)
        if m and method == "GET" and m.group(1) in self.branches:
            self._compare_branch(h, m.group(1), m.group(2))
            return
        m = re.fullmatch(re.escape(repo) + r"/compare/([0-9a-f]{40})\.\.\.([0-9a-f]{40})", path)
        if m and method == "GET":
            # Commits after base up to head, along some PR's commit list (the fake's history).
            base, head = m.groups()
            chain = next((p["commits"] for p in self.pulls.values() if base in p["commits"] and head in p["commits"]), None)
            if chain is None or chain.index(base) > chain.index(head):
                self._send(h, 404, {"message": "Not Found"})
                return
            between = chain[chain.index(base) + 1: chain.index(head) + 1]
            files = sorted({f for sha in between for f in self._commit_files.get(sha, [])})
            self._send(h, 200, {"status": "ahead", "ahead_by": len(between), "behind_by": 0,
                                "commits": [{"sha": sha} for sha in between],
                                "files": [{"filename": f, "status": "modified"} for f in files]})
            return
        m = re.fullmatch(re.escape(repo) + r"/pulls/(\d+)/reviews", path)
        if m and method == "GET":
            n = int(m.group(1))
            if n not in self.pulls:
                self._send(h, 404, {"message": "Not Found"})
            else:
                self._page(h, path, query, [self._review_json(n, r) for r in self._reviews.get(n, [])])
            return
        m = re.fullmatch(re.escape(repo) + r"/commits/([0-9a-f]{40})/check-runs", path)
        if m and method == "GET":
            runs = [r for r in self._check_runs if r["sha"] == m.group(1)]
            if "check_name" in query:
                runs = [r for r in runs if r["name"] == query["check_name"][0]]
            if "app_id" in query:
                runs = [r for r in runs if str(_app_id(r["app"])) == query["app_id"][0]]
            if query.get("filter", ["latest"])[0] == "latest":
                latest: dict[tuple[str, str], dict[str, Any]] = {}
                for r in runs:
                    latest[(r["name"], r["app"])] = r
                runs = list(latest.values())
            runs = sorted(runs, key=lambda r: -int(r["id"]))  # newest first, as GitHub lists them
            self._page(h, path, query, [self._check_run_json(r) for r in runs], list_item="check_runs")
            return
        if path == f"{repo}/check-runs" and method == "POST":
            app = login[: -len("[bot]")] if login.endswith("[bot]") else None
            problem = self._check_run_problem(payload, creating=True)
            if app is None:
                self._send(h, 403, {"message": NOT_AN_APP, "documentation_url": "https://docs.github.com/rest"})
            elif problem is not None:
                self._send(h, 422, {"message": "Validation Failed", "errors": [problem]})
            else:
                self._next_id += 1
                run = {"id": self._next_id, "sha": payload["head_sha"], "name": payload["name"], "status": "queued",
                       "conclusion": None, "app": app, "output": {"title": None, "summary": None, "text": None},
                       "annotations": [], "details_url": None, "external_id": ""}
                self._store_check_run(run, payload)
                self._check_runs.append(run)
                self._send(h, 201, self._check_run_json(run))
            return
        m = re.fullmatch(re.escape(repo) + r"/check-runs/(\d+)", path)
        if m and method in ("GET", "PATCH"):
            run = next((r for r in self._check_runs if r["id"] == int(m.group(1))), None)
            if run is None:
                self._send(h, 404, {"message": "Not Found"})
            elif method == "GET":
                self._send(h, 200, self._check_run_json(run))
            elif f"{run['app']}[bot]" != login:
                self._send(h, 403, {"message": "Invalid app_id `1` - check run can only be modified by the GitHub App "
                                               "that created it."})
            elif (problem := self._check_run_problem(payload, creating=False)) is not None:
                self._send(h, 422, {"message": "Validation Failed", "errors": [problem]})
            else:
                self._store_check_run(run, payload)
                self._send(h, 200, self._check_run_json(run))
            return
        m = re.fullmatch(re.escape(repo) + r"/issues/(\d+)/comments", path)
        if m:
            n = int(m.group(1))
            if n not in self.pulls:
                self._send(h, 404, {"message": "Not Found"})
            elif method == "GET":
                items = sorted((c for c in self._comments.values() if c["pr"] == n), key=lambda c: c["id"])
                since = query.get("since", [""])[0]  # GitHub: only comments updated at or after this time
                items = [c for c in items if not since or c["updated_at"] >= since]
                self._page(h, path, query, [self._comment_json(c) for c in items])
            elif method == "POST":
                if not isinstance(payload.get("body"), str) or len(payload["body"]) > 65536:
                    self._send(h, 422, {"message": "Validation Failed", "errors": [{"field": "body"}]})
                    return
                self._send(h, 201, self._comment_json(self._new_comment(n, payload["body"], login)))
            return
        m = re.fullmatch(re.escape(repo) + r"/issues/comments/(\d+)", path)
        if m:
            comment = self._comments.get(int(m.group(1)))
            if comment is None:
                self._send(h, 404, {"message": "Not Found"})
            elif comment["login"] != login and method != "GET":
                self._send(h, 403, {"message": "Must have admin rights to Repository."})
            elif method == "PATCH":
                if not isinstance(payload.get("body"), str) or len(payload["body"]) > 65536:
                    self._send(h, 422, {"message": "Validation Failed", "errors": [{"field": "body"}]})
                    return
                comment["body"] = payload["body"]
                comment["updated_at"] = self._tick()
                self._send(h, 200, self._comment_json(comment))
            elif method == "DELETE":
                del self._comments[comment["id"]]
                self._send(h, 204)
            else:
                self._send(h, 200, self._comment_json(comment))
            return
        m = re.fullmatch(re.escape(repo) + r"/statuses/([0-9a-f]{40})", path)
        if m and method == "POST":
            desc = payload.get("description")
            if payload.get("state") not in STATES:
                self._send(h, 422, {"message": "Validation Failed",
                                    "errors": [{"field": "state", "code": "invalid"}]})
            elif desc is not None and (not isinstance(desc, str) or len(desc) > 140):
                self._send(h, 422, {"message": "Validation Failed",
                                    "errors": [{"field": "description", "code": "custom",
                                                "message": "description is too long (maximum is 140 characters)"}]})
            else:
                self._send(h, 201, self._status_json(self._new_status(m.group(1), payload, login)))
            return
        m = re.fullmatch(re.escape(repo) + r"/commits/([0-9a-f]{40})/(statuses|status)", path)
        if m and method == "GET":
            sha = m.group(1)
            mine = [s for s in self._statuses if s["sha"] == sha]
            if m.group(2) == "statuses":
                self._page(h, path, query, [self._status_json(s) for s in reversed(mine)])
            else:
                latest_status: dict[str, dict[str, Any]] = {}
                for s in mine:
                    latest_status[s["context"]] = s
                states = {s["state"] for s in latest_status.values()}
                overall = ("failure" if states & {"failure", "error"} else "pending" if "pending" in states or not states
                           else "success")
                # GitHub's combined status lists simple statuses: no creator (who posted it is not said).
                simple = [{k: v for k, v in self._status_json(s).items() if k != "creator"}
                          for s in latest_status.values()]
                self._page(h, path, query, simple, list_item="statuses", extra={"state": overall, "sha": sha})
            return
        self._send(h, 404, {"message": "Not Found", "path": path})


def publish_cli(fake: FakeGitHub, *args: str, pr: str = "42") -> subprocess.CompletedProcess[str]:
    """``python -m ds4ci publish ARGS`` against the fake for acme/engine#PR, with a write token and no Actions env."""
    env = dict(os.environ, GITHUB_TOKEN=WRITE_TOKEN, DS4CI_GITHUB_THROTTLE="0")
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "ds4ci", "publish", *args, "--repo", "acme/engine", "--pr", pr,
                           "--api-url", fake.url], capture_output=True, text=True, env=env, check=False, timeout=120)


def as_the_publishing_job(monkeypatch: Any, pr: int, commits: list[str]) -> Iterator[FakeGitHub]:
    """A fixture's body: the fake with pull request ``pr`` at ``commits`` (its head last), and the environment of
    the publishing job (the Actions GITHUB_TOKEN: github-actions[bot], an app installation token)."""
    for key, value in {"DS4CI_GITHUB_THROTTLE": "0", "GITHUB_TOKEN": APP_TOKEN, "GITHUB_ACTIONS": "true"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    server = FakeGitHub().start()
    server.add_pull(pr, commits[-1], commits)
    yield server
    server.stop()
