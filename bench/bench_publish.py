"""HTTP requests per ``ds4ci publish``: first publish and an update of the sticky comment on a busy PR.

Publishing runs in a subprocess against the stateful fake GitHub API of the test suite
(tests/fakegithub.py, real HTTP on 127.0.0.1), which counts every request it receives. The PR has
150 (and --comments, default 300) comments by other people before the first publish; the results are
the committed test documents (tests/data/results/*.json: two passing runners whose
revisions.head.sha is the PR head, and a failing one for the update). They have no evidence bundle,
so they enter publishing after the trust step (``publish_documents``, as tests/e2e/test_publish.py
does; ``ds4ci publish`` itself refuses results without their bundle). Two tokens: a person's (no
check runs) and the Actions GITHUB_TOKEN (github-actions[bot]: check runs too). Counts are
deterministic, so one run is enough; the script checks the end state (exactly one sticky comment, a
status per runner) so a count never describes a broken publish.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, REPO, emit, parser, say

sys.path.insert(0, str(REPO / "tests"))
from fakegithub import ACTIONS_LOGIN, APP_TOKEN, BOT_LOGIN, WRITE_TOKEN, FakeGitHub

NAME = "publish"
TOKENS = {"person": (WRITE_TOKEN, BOT_LOGIN), "actions": (APP_TOKEN, ACTIONS_LOGIN)}
DRIVER = """
import sys
from pathlib import Path
from ds4ci.commands.publish import PublishRequest, publish_documents
from ds4ci.evidence.results import load
from ds4ci.github.verified import Published
url, *paths = sys.argv[1:]
docs = [Published(load(Path(p)), may_set_status=True) for p in paths]
sys.exit(publish_documents(docs, PublishRequest(repo="acme/engine", pr=42, api_url=url,
                                                target_url="https://github.invalid/acme/engine/actions/runs/1")))
"""
DATA = REPO / "tests" / "data" / "results"
PR = 42


def shape(path: str) -> str:
    """A request path with the variable parts named, so counts group by endpoint."""
    path = re.sub(r"/[0-9a-f]{40}", "/{sha}", path)
    path = re.sub(r"/comments/\d+", "/comments/{id}", path)
    return re.sub(r"^/repos/[^/]+/[^/]+", "/repos/{repo}", path)


def publish(fake: FakeGitHub, token: str, *results: Path) -> tuple[int, Counter[str]]:
    before = len(fake.requests)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")}
    env.update({"GITHUB_TOKEN": TOKENS[token][0], "DS4CI_GITHUB_THROTTLE": "0"})
    if token == "actions":
        env["GITHUB_ACTIONS"] = "true"
    proc = subprocess.run([str(BIN / "python"), "-c", DRIVER, fake.url, *map(str, results)],
                          env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"publish exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    made = fake.requests[before:]
    return len(made), Counter(f"{m} {shape(p)}" for m, p in made)


def sticky(fake: FakeGitHub, login: str) -> list[dict[str, Any]]:
    return [c for c in fake.comments(PR) if c["login"] == login]


def scenario(others: int, token: str) -> dict[str, Any]:
    passing = [DATA / "pass.json", DATA / "pass-second-runner.json"]
    head = json.loads(passing[0].read_text())["revisions"]["head"]["sha"]
    login = TOKENS[token][1]
    fake = FakeGitHub().start()
    try:
        fake.add_pull(PR, head, ["a" * 40, head])
        for i in range(others):
            fake.add_comment(PR, f"review comment {i}", "someone")
        first, first_by = publish(fake, token, *passing)
        assert len(sticky(fake, login)) == 1, "first publish must create exactly one sticky comment"
        update, update_by = publish(fake, token, DATA / "fail.json", passing[1])
        ours = sticky(fake, login)
        assert len(ours) == 1 and "fail" in ours[0]["body"], "the update must edit the same comment"
        again, again_by = publish(fake, token, DATA / "fail.json", passing[1])
        assert not [e for e in again_by if not e.startswith("GET ")], "publishing the same again writes nothing"
        states = fake.latest_states(head)
        assert len(states) == 2, states
        runs = len(fake.check_runs())
        assert runs == (2 if token == "actions" else 0), runs
    finally:
        fake.stop()
    return {"other_comments": others, "token": token, "first_publish_requests": first,
            "first_publish_by_endpoint": dict(first_by), "update_requests": update,
            "update_by_endpoint": dict(update_by), "unchanged_republish_requests": again,
            "final_states": states}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--comments", type=int, default=300)
    args = p.parse_args()
    figures: dict[str, Any] = {}
    for others in sorted({0, 150, args.comments}):
        for token in TOKENS:
            row = scenario(others, token)
            figures[f"pr_with_{others}_comments_{token}_token"] = row
            say(NAME, f"PR with {others} other comments, {token} token: first publish "
                      f"{row['first_publish_requests']} requests, update of the sticky comment "
                      f"{row['update_requests']} requests, the same again {row['unchanged_republish_requests']} "
                      "(reads only)")
            for label, key in (("first", "first_publish_by_endpoint"), ("update", "update_by_endpoint")):
                for endpoint, n in sorted(row[key].items()):
                    say(NAME, f"    {label:6} {n:3} x {endpoint}")
    emit(NAME, args, figures)


if __name__ == "__main__":
    main()
