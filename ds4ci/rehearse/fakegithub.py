"""A stateful fake of the GitHub REST endpoints ds4ci uses, served on 127.0.0.1 only.

PyGithub talks to it over real HTTP. It keeps comments, statuses and pull requests in memory,
paginates with Link headers like GitHub, validates statuses like GitHub (422), knows a write
token, a read-only token ("Resource not accessible by integration") and an App-style token
that cannot read /user, and can inject faults into the next requests. Callers read the
resulting state back (``comments()``, ``statuses()``, ``check_runs()``); ``requests`` is the log.

Statuses carry ``creator.login`` (who posted them: the token's login, or ``add_status(creator=)``)
in the list of a commit's statuses, and not in the combined status, as on GitHub; check runs carry
``app.slug``. Check runs are created (``POST /check-runs``) only by a GitHub App's token (the
``[bot]`` logins; a person's token gets GitHub's 403), updated by id only by the app that made them,
validated like GitHub (conclusion and status values, 65,535-character summary and text, at most 50
annotations per request, each with a path and lines), and listed for a ref with ``check_name``,
``app_id`` and ``filter`` (latest per name and app, or all); ``check_runs()`` returns them as stored.
For merge gating it also serves the combined status of a commit, a pull
request's reviews, its draft/mergeable/state fields (``mergeable`` may answer null a few times
first, as GitHub does while it computes it; ``base``: the branch it merges into, ``default_branch``: the
repository's, whose gate.yml a pull_request_target run records as its ``head_branch``), and
``POST /graphql`` answering the ``reviewThreads`` query with cursor pagination (``graphql_page_size`` threads per page).
Shapes follow GitHub's OpenAPI description (@octokit/openapi) and GraphQL schema.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ds4ci.rehearse.fakeroutes import route
from ds4ci.rehearse.fakestate import (
    ACTIONS_LOGIN,
    APP_TOKEN,
    BOT_LOGIN,
    MAIN_TIP,
    READ_TOKEN,
    WRITE_TOKEN,
    FakeState,
    Fault,
    Request,
)

__all__ = ["ACTIONS_LOGIN", "APP_TOKEN", "BOT_LOGIN", "MAIN_TIP", "READ_TOKEN", "TRUSTED_RUN", "WRITE_TOKEN",
           "FakeGitHub", "Fault"]

# add_status's default link: a run of the trusted gate made for the commit (what the publisher posts).
TRUSTED_RUN = "trusted-run"


class FakeGitHub(FakeState):
    _server: ThreadingHTTPServer | None = None

    # ----- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                fake._dispatch(self)

            do_GET = do_POST = do_PATCH = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ----- state set-up ---------------------------------------------------------------------
    def add_pull(self, number: int, head: str, commits: list[str] | None = None, *, state: str = "open",
                 draft: bool = False, merged: bool = False, mergeable: bool | None = True,
                 mergeable_state: str = "clean", base: str = "main") -> None:
        """A pull request into the branch ``base`` (its ``base.sha``: that branch's tip, see ``add_branch``)."""
        with self.lock:
            self.pulls[number] = {"head": head, "commits": list(commits or [head]), "state": state, "draft": draft,
                                  "merged": merged, "mergeable": [mergeable], "mergeable_state": mergeable_state,
                                  "files": [], "base": base}

    def set_pull_files(self, number: int, files: list[str | tuple[str, str]]) -> None:
        """What ``GET /pulls/{n}/files`` lists: a path, or (new, old) for a rename."""
        with self.lock:
            self.pulls[number]["files"] = list(files)

    def add_run(self, run_id: int, *, path: str = ".github/workflows/gate.yml", event: str = "pull_request_target",
                head_branch: str = "main", title: str = "", repo: str | None = None, head_sha: str | None = None,
                jobs: dict[str, str] | None = None) -> str:
        """A workflow run as GitHub records it; returns its html URL (what a status's target_url names).

        ``head_sha``: the commit the run's workflow file came from (default: the tip of ``head_branch``, as for a
        pull_request_target run, which runs on the repository's default branch whatever the pull request's base).
        ``jobs``: job name -> conclusion of attempt 1."""
        full = repo or f"{self.owner}/{self.repo}"
        with self.lock:
            sha = head_sha or (self.branches.get(head_branch) or [MAIN_TIP])[-1]
            self._runs[run_id] = {"id": run_id, "path": path, "event": event, "head_branch": head_branch,
                                  "head_sha": sha, "display_title": title, "repository": {"full_name": full},
                                  "html_url": f"https://github.com/{full}/actions/runs/{run_id}",
                                  "run_attempt": 1, "run_started_at": self._tick(), "status": "completed",
                                  "check_suite_id": 50000 + run_id, "attempts": [dict(jobs or {})]}
        return f"https://github.com/{full}/actions/runs/{run_id}"

    def add_artifact(self, run_id: int, name: str) -> None:
        """An artifact of run ``run_id`` (only that run's own job could have uploaded it), listed by name."""
        with self.lock:
            self._runs[run_id].setdefault("artifacts", []).append(name)

    def record_jobs(self, run_id: int, jobs: dict[str, str]) -> None:
        """The jobs GitHub recorded for the latest attempt of ``run_id`` once it finished (name -> conclusion)."""
        with self.lock:
            self._runs[run_id]["attempts"][-1] = dict(jobs)

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
                      app: str = "github-actions", title: str | None = None, details_url: str | None = None,
                      text: str | None = None) -> int:
        with self.lock:
            run_id = self._new_id()
            self._check_runs.append({"id": run_id, "sha": sha, "name": name, "status": status,
                                     "conclusion": conclusion if status == "completed" else None, "app": app,
                                     "output": {"title": title, "summary": None, "text": text}, "annotations": [],
                                     "details_url": details_url, "external_id": ""})
            return run_id

    def add_review(self, number: int, login: str, state: str, commit_id: str | None,
                   association: str = "MEMBER") -> None:
        with self.lock:
            self._reviews.setdefault(number, []).append(
                {"id": self._new_id(), "login": login, "state": state, "commit_id": commit_id,
                 "association": association, "submitted_at": self._tick()})

    def add_thread(self, number: int, path: str, line: int | None, *, resolved: bool = False,
                   outdated: bool = False, original_line: int | None = None) -> None:
        with self.lock:
            self._threads.setdefault(number, []).append(
                {"isResolved": resolved, "isOutdated": outdated, "path": path, "line": line,
                 "originalLine": original_line if original_line is not None else line})

    def add_comment(self, number: int, body: str, login: str = "someone") -> int:
        with self.lock:
            return int(self._new_comment(number, body, login)["id"])

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
                run_id = self._new_id()
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

    # ----- reading the state back -----------------------------------------------------------
    def comments(self, number: int | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(c) for c in self._comments.values() if number is None or c["pr"] == number]

    def statuses(self, sha: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(s) for s in self._statuses if sha is None or s["sha"] == sha]

    def check_runs(self, sha: str | None = None) -> list[dict[str, Any]]:
        """Every check run as stored (oldest first), with its ``output`` and every ``annotations`` item."""
        with self.lock:
            return [json.loads(json.dumps(r)) for r in self._check_runs if sha is None or r["sha"] == sha]

    def latest_states(self, sha: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for s in self.statuses(sha):
            out[s["context"]] = s["state"]
        return out

    def count(self, method: str | None = None, path_contains: str = "") -> int:
        with self.lock:
            return sum(1 for m, p in self.requests if (method is None or m == method) and path_contains in p)

    # ----- one request ----------------------------------------------------------------------
    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        split = urlsplit(h.path)
        method, path, query = h.command, split.path, parse_qs(split.query)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        if self._faulted(h, method, path):
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
            route(self, Request(h, method, path, query, payload, login, may_read_user))

    def _faulted(self, h: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        """Logs the request; answers it with the first injected fault that matches it, if any."""
        with self.lock:
            self.requests.append((method, path))
            for fault in self.faults:
                if fault.count > 0 and (fault.methods is None or method in fault.methods) and (
                        fault.path_contains in path):
                    fault.count -= 1
                    self._send(h, fault.status, {"message": fault.message}, fault.headers)
                    return True
        return False
