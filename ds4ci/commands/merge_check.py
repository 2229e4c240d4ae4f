"""``ds4ci merge-check``: is a pull request ready to merge on its exact current head?

Exit 0 ready; 1 not ready (one line per unmet condition); 2 usage or configuration error
(bad flags, no token, bad ``[merge]`` table); 3 GitHub could not be asked or answered badly.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from ds4ci.errors import EXIT_FAIL, EXIT_PASS, UsageError
from ds4ci.github import merge, mergeconfig
from ds4ci.options import configpath
from ds4ci.textsafe import json_text

_REPO = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")


def run_merge_check(
    *,
    pr: int,
    repo: str | None,
    api_url: str | None,
    runners: Sequence[str] | None,
    checks: Sequence[str] | None,
    approvals: int | None,
    as_json: bool,
    config: Path | None,
    token_env: str = "GITHUB_TOKEN",
    publisher: str | None = None,
    workflow: str | None = None,
) -> int:
    from ds4ci.github import mergefacts
    from ds4ci.github.client import DEFAULT_API_URL, THROTTLE_ENV, Client, connect

    if pr < 1:
        raise UsageError(f"--pr: expected a pull request number >= 1, found {pr}")
    need = mergeconfig.requirements(configpath.resolve(config, "merge-check", quiet=as_json), runners, checks,
                                    approvals, publisher, workflow)
    repo_name = repo or os.environ.get("GITHUB_REPOSITORY", "")
    if not _REPO.match(repo_name):
        raise UsageError(f"--repo: expected OWNER/NAME (or $GITHUB_REPOSITORY), found {repo_name!r}")
    token = os.environ.get(token_env, "")
    if not token:
        raise UsageError(f"no token: set the environment variable {token_env}")
    url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    polite = os.environ.get(THROTTLE_ENV, "1") != "0"  # "0": tests on loopback, no pauses

    gh = connect(token, url)
    try:
        gql = mergefacts.GraphQL(mergefacts.graphql_url(url), token, backoff_s=1.0 if polite else 0.0)
        facts = mergefacts.gather(Client(gh, repo_name), gql, repo_name, pr, need,
                                  mergeable_delay_s=2.0 if polite else 0.0)
    finally:
        gh.close()
    report = merge.evaluate(facts, need)
    code = EXIT_PASS if report.ready else EXIT_FAIL
    if as_json:
        doc = {"repo": repo_name, **report.to_json(), "exit_code": code}
        sys.stdout.write(json_text(json.dumps(doc, indent=2, sort_keys=True)) + "\n")
    else:
        sys.stdout.write(merge.render_text(report))
    return code
