"""The few GitHub REST calls ds4ci makes, through PyGithub, with bounded retries.

Retries: PyGithub's ``GithubRetry`` already retries 5xx and rate-limit 403s (a 403 with
``Retry-After``, or a body saying "rate limit"); it does not cap a ``Retry-After`` wait and
does not retry PATCH. :class:`BoundedRetry` adds PATCH and 429, honours ``Retry-After`` and
``x-ratelimit-reset`` on any retried response, and gives up (PublishError) once the total
wait would exceed a budget instead of sleeping for as long as the server asks.

The token is only ever handed to PyGithub's ``Auth.Token``; no message here contains it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from github import Auth, Github, GithubException, GithubRetry
from github.PaginatedList import PaginatedList

from ds4ci.errors import PublishError

DEFAULT_API_URL = "https://api.github.com"
THROTTLE_ENV = "DS4CI_GITHUB_THROTTLE"  # "0": no pauses between requests, short backoff (tests)
READ_ONLY_MESSAGE = "Resource not accessible by integration"
ACTIONS_BOT = "github-actions[bot]"
STATES = ("error", "failure", "pending", "success")
MAX_DESCRIPTION = 140

T = TypeVar("T")


class ReadOnlyTokenError(PublishError):
    """The token may read but not write (pull requests from forks get such a token)."""


class RetryBudgetExceeded(PublishError):
    """GitHub asked us to wait longer, in total, than we are willing to."""


def read_only_message(action: str) -> str:
    return (
        f"GitHub refused to {action}: the token is read-only ({READ_ONLY_MESSAGE!r}). Pull requests from "
        "forks get a read-only GITHUB_TOKEN. Use the two-stage workaround: the gate job uploads its "
        "results.json as an artifact, and a separate workflow triggered by `workflow_run` (which runs with "
        "a write token in the base repository) downloads it and runs `ds4ci publish`. See docs/reporting.md."
    )


class BoundedRetry(GithubRetry):
    """GithubRetry plus PATCH/429, server-requested waits honoured, and a total wait budget."""

    def __init__(self, max_total_wait: float = 300.0, waited: float = 0.0, **kwargs: Any) -> None:
        self.max_total_wait = max_total_wait
        self.waited = waited
        kwargs.setdefault("status_forcelist", [*range(500, 600), 429])
        kwargs.setdefault(
            "allowed_methods", frozenset({"GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"})
        )
        super().__init__(**kwargs)

    def new(self, **kw: Any) -> BoundedRetry:
        kw.update(max_total_wait=self.max_total_wait, waited=self.waited)
        retry: BoundedRetry = super().new(**kw)
        return retry

    def _server_wait(self, response: Any) -> float | None:
        headers = getattr(response, "headers", None) or {}
        retry_after = headers.get("Retry-After")
        if retry_after is not None:
            try:
                return max(float(self.parse_retry_after(retry_after)), 0.0)
            except Exception:
                return None
        if headers.get("x-ratelimit-remaining") == "0" and str(headers.get("x-ratelimit-reset", "")).isdigit():
            return max(int(headers["x-ratelimit-reset"]) - time.time(), 0.0) + 1.0
        return None

    def sleep(self, response: Any = None) -> None:
        wait = self._server_wait(response) if response is not None else None
        if wait is None:
            wait = self.get_backoff_time()
        if self.waited + wait > self.max_total_wait:
            raise RetryBudgetExceeded(
                f"GitHub asked to wait {wait:.0f} s more after {self.waited:.0f} s of retries; the budget is "
                f"{self.max_total_wait:.0f} s. Try again later (rate limit or outage)."
            )
        # Mutating is deliberate: urllib3 calls sleep() on the Retry that the next increment()
        # copies via new(), which carries `waited` forward.
        self.waited += wait
        if wait > 0:
            time.sleep(wait)


@dataclass(frozen=True)
class Comment:
    id: int
    author: str
    body: str
    created_at: str
    updated_at: str = ""


def _throttled() -> bool:
    return os.environ.get(THROTTLE_ENV, "1") != "0"


def connect(token: str, api_url: str | None = None, *, throttle: bool | None = None) -> Github:
    """A PyGithub client; production keeps PyGithub's pauses between requests and writes."""
    throttle = _throttled() if throttle is None else throttle
    retry = BoundedRetry(
        total=6,
        backoff_factor=1.0 if throttle else 0.01,
        backoff_max=30.0,
        secondary_rate_wait=60.0 if throttle else 1.0,
        max_rate_limit_wait=300.0,
        max_total_wait=600.0 if throttle else 30.0,
        raise_on_status=False,  # hand the last error response to PyGithub, which raises GithubException
    )
    extra: dict[str, Any] = {} if throttle else {"seconds_between_requests": 0, "seconds_between_writes": 0}
    return Github(
        auth=Auth.Token(token),
        base_url=(api_url or DEFAULT_API_URL).rstrip("/"),
        timeout=30,
        per_page=100,
        retry=retry,
        **extra,
    )


def _call(action: str, fn: Callable[[], T]) -> T:
    """Run one API call; turn every failure into a PublishError that says what was refused."""
    try:
        return fn()
    except PublishError:
        raise
    except GithubException as exc:
        message = exc.data.get("message") if isinstance(exc.data, dict) else None
        if exc.status == 403 and message == READ_ONLY_MESSAGE:
            raise ReadOnlyTokenError(read_only_message(action)) from None
        if exc.status == 401:
            raise PublishError(f"GitHub refused to {action}: 401 Bad credentials (is the token valid?)") from None
        raise PublishError(f"GitHub refused to {action}: {exc.status} {message or exc.data!s:.300}") from None
    except Exception as exc:  # network errors, retries exhausted inside urllib3
        raise PublishError(f"could not {action}: {type(exc).__name__}: {str(exc)[:300]}") from None


class Client:
    """One repository's endpoints. ``repo`` is OWNER/NAME."""

    def __init__(self, gh: Github, repo: str) -> None:
        self._gh = gh
        self.repo = repo
        self._base = f"/repos/{repo}"

    def identity(self, installation_author: str | None = None) -> str:
        """The login comments are written as; GitHub App tokens cannot read /user (403).

        For such an installation token the author is ``installation_author`` (--comment-author),
        else github-actions[bot] under Actions; elsewhere it cannot be known and is refused.
        """
        try:
            login: str = self._gh.get_user().login
            return login
        except GithubException as exc:
            if exc.status == 403 and installation_author:
                return installation_author
            if exc.status == 403 and os.environ.get("GITHUB_ACTIONS"):
                # Installation tokens (GITHUB_TOKEN) post as github-actions[bot] but may not ask.
                return ACTIONS_BOT
            raise PublishError(
                f"cannot find out whose token this is (GET /user answered {exc.status}); outside GitHub Actions "
                "the token must be able to read /user, or name the comment author with --comment-author "
                "(an app installation token posts as <app-slug>[bot]); nothing was written"
            ) from None
        except Exception as exc:
            raise PublishError(f"could not read /user: {type(exc).__name__}: {str(exc)[:300]}") from None

    def _json(self, verb: str, url: str, action: str, payload: dict[str, Any] | None = None) -> Any:
        def call() -> Any:
            _, data = self._gh.requester.requestJsonAndCheck(verb, url, input=payload)
            return data

        return _call(action, call)

    def pr_head(self, number: int) -> str:
        head = self.pull(number).get("head")
        sha = head.get("sha") if isinstance(head, dict) else None
        if not isinstance(sha, str):
            raise PublishError(f"pull request #{number}: GitHub's answer has no head SHA")
        return sha

    def pr_commits(self, number: int) -> list[str]:
        """The PR's commit SHAs, oldest first (GitHub lists at most 250)."""

        def call() -> list[str]:
            items: PaginatedList[Any] = PaginatedList(
                _RawItem, self._gh.requester, f"{self._base}/pulls/{number}/commits", None
            )
            return [str(item.raw_data["sha"]) for item in items]

        return _call(f"list the commits of pull request #{number}", call)

    # ----- reads for merge-check (raw JSON; ds4ci.github.mergefacts validates the shapes) -----
    def pull(self, number: int) -> dict[str, Any]:
        data = self._json("GET", f"{self._base}/pulls/{number}", f"read pull request #{number}")
        if not isinstance(data, dict):
            raise PublishError(f"pull request #{number}: GitHub's answer is not a JSON object")
        return data

    def default_branch(self) -> str:
        """The repository's default branch, as GitHub records it: pull_request_target runs its workflow file."""
        data = self._json("GET", self._base, f"read the repository {self.repo}")
        found = data.get("default_branch") if isinstance(data, dict) else None
        if not isinstance(found, str) or not found:
            raise PublishError(f"the repository {self.repo}: GitHub's answer names no default branch")
        return found

    def workflow_run(self, run_id: int) -> Any:
        """GitHub's record of one workflow run of this repository; None when GitHub has no such run (404)."""
        return self._get_or_none(f"{self._base}/actions/runs/{run_id}", f"read workflow run {run_id}")

    def run_jobs(self, run_id: int, attempt: int) -> list[Any]:
        """The jobs of one attempt of a workflow run (every page), as GitHub recorded them."""
        return self._pages(f"{self._base}/actions/runs/{run_id}/attempts/{attempt}/jobs",
                           f"list the jobs of run {run_id} attempt {attempt}", "jobs")

    def run_artifact_names(self, run_id: int) -> list[str]:
        """The names of a workflow run's artifacts (every page): only that run's jobs can upload them."""
        items = self._pages(f"{self._base}/actions/runs/{run_id}/artifacts", f"list the artifacts of run {run_id}",
                            "artifacts")
        return [str(i["name"]) for i in items if isinstance(i, dict) and isinstance(i.get("name"), str)]

    def compare_status(self, base: str, head: str) -> str:
        """GitHub's ``status`` of compare base...head (identical, behind, ahead, diverged); "unknown" on 404."""
        data = self._get_or_none(f"{self._base}/compare/{base}...{head}", f"compare {base[:40]}...{head[:12]}")
        found = data.get("status") if isinstance(data, dict) else "unknown"
        return found if isinstance(found, str) and found else "unknown"

    def _get_or_none(self, url: str, action: str) -> Any:
        """One GET's JSON, or None when GitHub answers 404 (no such thing); every other failure is raised."""

        def call() -> Any:
            try:
                _, data = self._gh.requester.requestJsonAndCheck("GET", url)
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise
            return data

        return _call(action, call)

    def _pages(self, url: str, action: str, list_item: str | None = None) -> list[Any]:
        def call() -> list[Any]:
            extra: dict[str, Any] = {"list_item": list_item} if list_item else {}
            items: PaginatedList[Any] = PaginatedList(_RawItem, self._gh.requester, url, None, **extra)
            return [item.raw_data for item in items]

        return _call(action, call)

    def check_runs(self, sha: str) -> list[Any]:
        """The latest check run of each name on ``sha`` (every page)."""
        return self._pages(f"{self._base}/commits/{sha}/check-runs", f"list the check runs of {sha[:12]}", "check_runs")

    def commit_statuses(self, sha: str) -> list[Any]:
        """Every status of ``sha``, newest first, each with its ``creator`` (every page)."""
        return self._pages(f"{self._base}/commits/{sha}/statuses", f"list the statuses of {sha[:12]}")

    def reviews(self, number: int) -> list[Any]:
        """The reviews of a pull request, oldest first (every page)."""
        return self._pages(f"{self._base}/pulls/{number}/reviews", f"list the reviews of pull request #{number}")

    def compare(self, base: str, head: str) -> tuple[list[str], list[str]]:
        """(commits, changed files) from ``base`` (excluded) to ``head`` (GET .../compare/base...head)."""
        data = self._json("GET", f"{self._base}/compare/{base}...{head}", f"compare {base[:12]}...{head[:12]}")
        if not isinstance(data, dict):
            raise PublishError(f"compare {base[:12]}...{head[:12]}: GitHub's answer is not an object")
        commits = [str(c.get("sha")) for c in data.get("commits", []) if isinstance(c, dict)]
        files = [str(f.get("filename")) for f in data.get("files", []) if isinstance(f, dict)]
        return commits, files

    def list_comments(self, number: int, since: str | None = None) -> list[Comment]:
        """The comments of #number, oldest first; with ``since`` (ISO 8601) only those updated at or after it."""

        def call() -> list[Comment]:
            # Raw items: PyGithub's IssueComment.raw_data would re-fetch every comment.
            items: PaginatedList[Any] = PaginatedList(
                _RawItem, self._gh.requester, f"{self._base}/issues/{number}/comments",
                {"since": since} if since else None,
            )
            out = []
            for c in items:
                data = c.raw_data
                user = data.get("user") or {}
                out.append(
                    Comment(
                        id=int(data["id"]),
                        author=str(user.get("login", "")),
                        body=str(data.get("body") or ""),
                        created_at=str(data.get("created_at", "")),
                        updated_at=str(data.get("updated_at") or data.get("created_at") or ""),
                    )
                )
            return out

        return _call(f"list the comments of #{number}", call)

    def create_comment(self, number: int, body: str) -> Comment:
        data = self._json(
            "POST", f"{self._base}/issues/{number}/comments", f"comment on #{number}", {"body": body}
        )
        return _written(data, body)

    def edit_comment(self, comment_id: int, body: str) -> Comment:
        """The comment as GitHub returned it after the edit (its body is what ``commentrecord`` records)."""
        return _written(self._json("PATCH", f"{self._base}/issues/comments/{comment_id}", "edit the ds4ci comment",
                                   {"body": body}), body)

    def delete_comment(self, comment_id: int) -> None:
        try:
            self._json("DELETE", f"{self._base}/issues/comments/{comment_id}", "delete a duplicate ds4ci comment")
        except PublishError as exc:
            # Another publisher deleted the same duplicate first: the state we want holds.
            if "404" not in str(exc):
                raise

    def create_check_run(self, name: str, head_sha: str, conclusion: str, details_url: str | None,
                         output: dict[str, Any]) -> tuple[int, str]:
        """A completed check run on ``head_sha`` (PyGithub's check run API); its id and the app it belongs to."""

        def call() -> tuple[int, str]:
            extra: dict[str, Any] = {"details_url": details_url} if details_url else {}
            run = self._repo().create_check_run(name=name, head_sha=head_sha, status="completed",
                                                conclusion=conclusion, output=output, **extra)
            return int(run.id), str(run.raw_data.get("app", {}).get("slug", ""))

        return _call(f"create check run {name} on {head_sha[:12]}", call)

    def update_check_run(self, run_id: int, name: str, conclusion: str, details_url: str | None,
                         output: dict[str, Any]) -> None:
        """Replace what check run ``run_id`` says (one PATCH; PyGithub's check run API)."""

        def call() -> None:
            extra: dict[str, Any] = {"details_url": details_url} if details_url else {}
            self._repo().get_check_run(run_id).edit(status="completed", conclusion=conclusion, output=output, **extra)

        _call(f"update check run {name} ({run_id})", call)

    def _repo(self) -> Any:
        # Lazy: no GET of the repository; each check-run call is the one request it names.
        from github.Repository import Repository

        return Repository(self._gh.requester.withLazy(True), url=f"/repos/{self.repo}")

    def create_status(
        self, sha: str, state: str, context: str, description: str, target_url: str | None
    ) -> None:
        if state not in STATES:
            raise PublishError(f"internal: status state {state!r} is not one of {STATES}")
        payload: dict[str, Any] = {"state": state, "context": context, "description": description[:MAX_DESCRIPTION]}
        if target_url:
            payload["target_url"] = target_url
        self._json("POST", f"{self._base}/statuses/{sha}", f"set status {context} on {sha[:12]}", payload)


class _RawItem:
    """Minimal PaginatedList content class that keeps the raw JSON of each item."""

    def __init__(self, requester: Any, headers: Any, attributes: Any, *args: Any, **kwargs: Any) -> None:
        self.raw_data: dict[str, Any] = attributes


def _written(data: dict[str, Any], sent: str) -> Comment:
    """A comment from GitHub's answer to a write; its body as GitHub returned it (``sent`` where it returned none)."""
    created = str(data.get("created_at", ""))
    body = data.get("body")
    return Comment(int(data["id"]), str((data.get("user") or {}).get("login", "")),
                   body if isinstance(body, str) else sent, created, str(data.get("updated_at") or created))
