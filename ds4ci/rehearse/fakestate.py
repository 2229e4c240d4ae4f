"""The fake GitHub's state (pull requests, statuses, comments, check runs, workflow runs) and its HTTP replies.

Everything here is what the endpoints (``fakeroutes``) read and write under ``lock``; ``fakegithub`` adds
the server's lifecycle and the calls that set state up and read it back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

WRITE_TOKEN = "ghs_fake_write_token_0123456789abcdefghijklmnopqrstuvwxyz"  # noqa: S105 (the fake's own, accepted nowhere else)
READ_TOKEN = "ghs_fake_read_only_token_0123456789abcdefghijklmnopqrstuvw"  # noqa: S105
APP_TOKEN = "ghs_fake_app_installation_token_0123456789abcdefghijklmnop"  # noqa: S105
BOT_LOGIN = "ds4ci-bot"
ACTIONS_LOGIN = "github-actions[bot]"  # who a workflow's GITHUB_TOKEN posts as
MAIN_TIP = "ba5e" * 10  # the tip of the fake's base branch "main" (a pull_request_target run's head_sha)


@dataclass
class Fault:
    status: int
    count: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "Server Error"
    methods: frozenset[str] | None = None
    path_contains: str = ""  # only requests whose path contains this


@dataclass(frozen=True)
class Request:
    """One authenticated request, as an endpoint sees it."""

    h: BaseHTTPRequestHandler
    method: str
    path: str
    query: dict[str, list[str]]
    payload: dict[str, Any]
    login: str
    may_read_user: bool


class FakeState:
    def __init__(self, owner: str = "acme", repo: str = "engine") -> None:
        self.owner = owner
        self.repo = repo
        self.lock = threading.Lock()
        # The publishing job's run: a comment its token (github-actions[bot]) creates or edits is recorded as that
        # run's artifact ds4ci-comment-<id>-<digest of the body written>, as gate.yml's step after publish uploads
        # it (None: nothing recorded; a pull request's own workflow writing is no publishing job).
        self.publishing_run: int | None = None
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
        self.default_branch = "main"  # GET /repos/OWNER/NAME's default_branch: whose gate.yml pull_request_target runs
        self.graphql_page_size = 100
        self.graphql_queries: list[dict[str, Any]] = []
        # Called (under the lock: mutate state directly) on every GraphQL query, e.g. to push mid-check.
        self.on_graphql: Callable[[Any], None] | None = None
        self._next_id = 1000
        self._clock = 0
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self._port = 0

    @property
    def url(self) -> str:
        assert self._port, "the fake GitHub is not started"
        return f"http://127.0.0.1:{self._port}"

    @property
    def api(self) -> str:
        """This repository's REST path: /repos/OWNER/NAME."""
        return f"/repos/{self.owner}/{self.repo}"

    def _tick(self) -> str:
        self._clock += 1
        return f"2026-11-29T12:{self._clock // 60 % 60:02d}:{self._clock % 60:02d}Z"

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _new_comment(self, number: int, body: str, login: str) -> dict[str, Any]:
        cid = self._new_id()
        now = self._tick()
        comment = {"id": cid, "pr": number, "body": body, "login": login, "created_at": now, "updated_at": now}
        self._comments[cid] = comment
        return comment

    def _new_status(self, sha: str, payload: dict[str, Any], login: str) -> dict[str, Any]:
        status = {"id": self._new_id(), "sha": sha, "state": payload["state"], "context": payload.get("context", "default"),
                  "description": payload.get("description"), "target_url": payload.get("target_url"),
                  "creator": login, "created_at": self._tick()}
        self._statuses.append(status)
        return status

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

    def not_found(self, req: Request) -> None:
        self._send(req.h, 404, {"message": "Not Found"})
