"""Fetching the facts ``ds4ci.github.merge.evaluate`` judges: REST through PyGithub, review threads through GraphQL.

GitHub's answers are validated here (a field of the wrong type is a GitHub error, exit 3, never
a guess). Everything is read for one head commit; the PR is read again at the end, and if its
head moved meanwhile the check stops (exit 3) instead of mixing facts of two commits.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests

from ds4ci.errors import PublishError
from ds4ci.github import merge, publish, statuses, vouch
from ds4ci.github.client import Client
from ds4ci.github.shapes import bad as _bad
from ds4ci.github.shapes import check_runs
from ds4ci.github.shapes import get as _get

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
MAX_THREAD_PAGES = 100  # 100 threads a page: 10,000 threads is far beyond any real PR
THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $cursor: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $cursor) {
        pageInfo { hasNextPage endCursor }
        nodes { isResolved isOutdated path line originalLine }
      }
    }
  }
}
"""


def graphql_url(api_url: str) -> str:
    """GitHub's GraphQL endpoint for a REST base URL (GitHub Enterprise Server: /api/v3 -> /api/graphql)."""
    base = api_url.rstrip("/")
    if base.endswith("/api/v3"):
        return base[: -len("/v3")] + "/graphql"
    return base + "/graphql"


class GraphQL:
    """A minimal GraphQL client: bounded retries on 5xx and network errors, errors as PublishError."""

    def __init__(self, url: str, token: str, *, attempts: int = 3, backoff_s: float = 1.0, timeout_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._url = url
        self._headers = {"Authorization": f"bearer {token}", "Accept": "application/json"}
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._timeout_s = timeout_s
        self._sleep = sleep

    def query(self, query: str, variables: Mapping[str, Any], action: str) -> dict[str, Any]:
        last = ""
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(self._backoff_s * 2 ** (attempt - 1))
            try:
                response = requests.post(self._url, json={"query": query, "variables": dict(variables)},
                                         headers=self._headers, timeout=self._timeout_s)
            except requests.RequestException as exc:
                last = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}"
                continue
            return self._answer(response, action)
        raise PublishError(f"could not {action}: GraphQL {self._url} failed {self._attempts} times (last: {last})")

    @staticmethod
    def _answer(response: requests.Response, action: str) -> dict[str, Any]:
        try:
            doc = response.json()
        except ValueError:
            doc = None
        if response.status_code == 401:
            raise PublishError(f"GitHub refused to {action}: 401 Bad credentials (is the token valid?)")
        if response.status_code != 200:
            message = doc.get("message") if isinstance(doc, dict) else response.text[:300]
            raise PublishError(f"GitHub refused to {action}: {response.status_code} {message}")
        if not isinstance(doc, dict):
            raise PublishError(f"could not {action}: GraphQL answered something that is not a JSON object")
        errors = doc.get("errors")
        if errors:
            messages = [str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors]
            raise PublishError(f"GitHub refused to {action}: {'; '.join(messages)[:500]}")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise PublishError(f"could not {action}: GraphQL answered no data object")
        return data


# ----- shapes ----------------------------------------------------------------------------------


def pull_facts(number: int, data: Any, reads: int = 1) -> merge.PullFacts:
    what = f"pull request #{number}"
    head = _get(_get(data, "head", dict, what), "sha", str, f"{what} head")
    if not _HEX40.match(head):
        raise _bad(f"{what} head sha", "40 lowercase hexadecimal characters", head)
    state = _get(data, "state", str, what)
    return merge.PullFacts(
        number=number,
        head=head,
        state=state,
        merged=bool(_get(data, "merged", bool, what, nullable=True)),
        draft=bool(_get(data, "draft", bool, what, nullable=True)),
        mergeable=_get(data, "mergeable", bool, what, nullable=True),
        mergeable_state=_get(data, "mergeable_state", str, what, nullable=True),
        mergeable_reads=reads,
        base_ref=str(_get(_get(data, "base", dict, what, nullable=True) or {}, "ref", str, f"{what} base",
                          nullable=True) or ""),
    )


def reviews(items: list[Any], number: int) -> tuple[merge.Review, ...]:
    what = f"the reviews of #{number}"
    out = []
    for item in items:
        user = _get(item, "user", dict, what, nullable=True)
        author = _get(user, "login", str, what) if user is not None else "ghost"  # a deleted account
        out.append(merge.Review(
            author=author,
            state=_get(item, "state", str, what),
            commit_id=_get(item, "commit_id", str, what, nullable=True),
            association=str(_get(item, "author_association", str, what, nullable=True) or "NONE"),
        ))
    return tuple(out)


def review_threads(gql: GraphQL, repo: str, number: int) -> tuple[merge.ReviewThread, ...]:
    """Every review thread of the PR, following ``pageInfo`` until ``hasNextPage`` is false."""
    owner, name = repo.split("/", 1)
    what = f"the review threads of #{number}"
    threads: list[merge.ReviewThread] = []
    cursor: str | None = None
    for _ in range(MAX_THREAD_PAGES):
        data = gql.query(THREADS_QUERY, {"owner": owner, "name": name, "number": number, "cursor": cursor},
                         f"list the review threads of pull request #{number}")
        repository = _get(data, "repository", dict, what)
        pull = _get(repository, "pullRequest", dict, what)
        page = _get(pull, "reviewThreads", dict, what)
        info = _get(page, "pageInfo", dict, what)
        for node in _get(page, "nodes", list, what):
            threads.append(merge.ReviewThread(
                path=_get(node, "path", str, what),
                line=_get(node, "line", int, what, nullable=True),
                original_line=_get(node, "originalLine", int, what, nullable=True),
                resolved=_get(node, "isResolved", bool, what),
                outdated=bool(_get(node, "isOutdated", bool, what, nullable=True)),
            ))
        if not _get(info, "hasNextPage", bool, what):
            return tuple(threads)
        cursor = _get(info, "endCursor", str, what)
    raise PublishError(f"{what}: more than {MAX_THREAD_PAGES} pages; refusing to judge a partial list")


# ----- gathering -------------------------------------------------------------------------------


def read_pull(client: Client, number: int, *, reads: int, delay_s: float,
              sleep: Callable[[float], None] = time.sleep) -> merge.PullFacts:
    """The PR, re-read while GitHub has not computed ``mergeable`` yet (at most ``reads`` times)."""
    pull = pull_facts(number, client.pull(number))
    count = 1
    while pull.mergeable is None and pull.state == "open" and not pull.merged and count < reads:
        sleep(delay_s)
        count += 1
        pull = pull_facts(number, client.pull(number), count)
    return pull


def gather(
    client: Client,
    gql: GraphQL,
    repo: str,
    number: int,
    need: merge.Requirements,
    *,
    mergeable_reads: int = 5,
    mergeable_delay_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> merge.MergeFacts:
    pull = read_pull(client, number, reads=mergeable_reads, delay_s=mergeable_delay_s, sleep=sleep)
    head = pull.head
    found_statuses = statuses.parse(client.commit_statuses(head), head)
    runs = check_runs(client.check_runs(head), head)
    found_reviews = reviews(client.reviews(number), number)
    threads = review_threads(gql, repo, number)
    voucher = vouch.Voucher(client, repo, need)
    vouches = {runner: voucher.judge(head, runner, found_statuses, runs) for runner in need.runners}
    green_on = {}
    for runner in need.runners:
        if not vouches[runner].green:
            older = publish.last_validated_predecessor(client, number, head, runner, need.publisher,
                                                       vouched=voucher.judge_commit)
            if older:
                green_on[runner] = older
    artifacts: dict[int, tuple[str, ...]] = {}
    if need.calibration_max_age_days > 0:  # each vouching run's own record of the calibrations (calrecord)
        for v in vouches.values():
            if v.green and v.run is not None and v.run not in artifacts:
                artifacts[v.run] = tuple(client.run_artifact_names(v.run))
    now = pull_facts(number, client.pull(number))
    if now.head != head:
        raise PublishError(
            f"pull request #{number} moved from {head} to {now.head} while it was being checked; run merge-check again"
        )
    today = time.strftime("%Y-%m-%d", time.gmtime())
    return merge.MergeFacts(pull, found_statuses, runs, found_reviews, threads, green_on, today, vouches, artifacts)
