"""HTTP requests per ``ds4ci publish``: first publish and an update of the sticky comment on a busy PR.

``ds4ci publish`` runs as a subprocess against the stateful fake GitHub API of the test suite
(tests/fakegithub.py, real HTTP on 127.0.0.1), which counts every request it receives. The PR has
300 comments by other people before the first publish; the results are the committed test
documents (tests/data/results/*.json: two passing runners whose revisions.head.sha is the PR head,
and a failing one for the update). Counts are deterministic, so one run is enough; the script
checks the end state (exactly one sticky comment, a status per runner) so a count never describes
a broken publish.
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
from fakegithub import BOT_LOGIN, WRITE_TOKEN, FakeGitHub

NAME = "publish"
DATA = REPO / "tests" / "data" / "results"
PR = 42


def shape(path: str) -> str:
    """A request path with the variable parts named, so counts group by endpoint."""
    path = re.sub(r"/[0-9a-f]{40}", "/{sha}", path)
    path = re.sub(r"/comments/\d+", "/comments/{id}", path)
    return re.sub(r"^/repos/[^/]+/[^/]+", "/repos/{repo}", path)


def publish(fake: FakeGitHub, *results: Path) -> tuple[int, Counter[str]]:
    before = len(fake.requests)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")}
    env.update({"GITHUB_TOKEN": WRITE_TOKEN, "DS4CI_GITHUB_THROTTLE": "0"})
    proc = subprocess.run(
        [str(BIN / "ds4ci"), "publish", *map(str, results), "--repo", "acme/engine", "--pr", str(PR),
         "--api-url", fake.url, "--target-url", "https://github.invalid/acme/engine/actions/runs/1"],
        env=env, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"ds4ci publish exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    made = fake.requests[before:]
    return len(made), Counter(f"{m} {shape(p)}" for m, p in made)


def sticky(fake: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in fake.comments(PR) if c["login"] == BOT_LOGIN]


def scenario(others: int) -> dict[str, Any]:
    passing = [DATA / "pass.json", DATA / "pass-second-runner.json"]
    head = json.loads(passing[0].read_text())["revisions"]["head"]["sha"]
    fake = FakeGitHub().start()
    try:
        fake.add_pull(PR, head, ["a" * 40, head])
        for i in range(others):
            fake.add_comment(PR, f"review comment {i}", "someone")
        first, first_by = publish(fake, *passing)
        assert len(sticky(fake)) == 1, "first publish must create exactly one sticky comment"
        update, update_by = publish(fake, DATA / "fail.json", passing[1])
        ours = sticky(fake)
        assert len(ours) == 1 and "fail" in ours[0]["body"], "the update must edit the same comment"
        states = fake.latest_states(head)
        assert len(states) == 2, states
    finally:
        fake.stop()
    return {"other_comments": others, "first_publish_requests": first, "first_publish_by_endpoint": dict(first_by),
            "update_requests": update, "update_by_endpoint": dict(update_by), "final_states": states}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--comments", type=int, default=300)
    args = p.parse_args()
    figures: dict[str, Any] = {}
    for others in sorted({0, args.comments}):
        row = scenario(others)
        figures[f"pr_with_{others}_comments"] = row
        say(NAME, f"PR with {others} other comments: first publish {row['first_publish_requests']} requests, "
                  f"update of the sticky comment {row['update_requests']} requests")
        for label, key in (("first", "first_publish_by_endpoint"), ("update", "update_by_endpoint")):
            for endpoint, n in sorted(row[key].items()):
                say(NAME, f"    {label:6} {n:3} x {endpoint}")
    emit(NAME, args, figures)


if __name__ == "__main__":
    main()
