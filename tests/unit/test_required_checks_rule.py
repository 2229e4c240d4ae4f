"""One rule on required checks, written once (docs/security.md) and linked from the docs that mention it.

The rule: branch protection requires the ``ds4ci/<runner>`` statuses and never a job name, ``verdict <runner>``
included. The fact its reason cites is held too: gate.yml's verdict jobs are skipped (a skipped job counts as
success) whenever its plan job does not succeed.
"""

from __future__ import annotations

import re
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Require the `ds4ci/<runner>` statuses, never job names"
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# How a doc would advise requiring a job by name: the advice the rule forbids.
ADVICE = re.compile(r"(?:may|can|also|should)\s+require\s+(?:the\s+checks?\s+)?`(?:ds4ci / )?verdict", re.IGNORECASE)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but '-' dropped, spaces as '-'."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_the_rule_is_written_once_in_security_md() -> None:
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert text.count(HEADING) == 1
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    for said in ("**The rule.**", "`verdict <runner>`", "counts as *success*", "merge-check", "expected source"):
        assert said in section, said
    assert [d.name for d in DOCS if HEADING in d.read_text(encoding="utf-8")] == ["security.md"]


def test_the_docs_that_mention_required_checks_link_the_rule_and_none_advises_a_job_name() -> None:
    link = f"security.md#{_anchor(HEADING)}"
    assert link == "security.md#require-the-ds4cirunner-statuses-never-job-names"
    for name in ("adopting.md", "merging.md"):
        assert link in (ROOT / "docs" / name).read_text(encoding="utf-8"), name
    advising = [f"{d.name}: {m.group(0)}" for d in DOCS for m in ADVICE.finditer(d.read_text(encoding="utf-8"))]
    assert advising == []
    assert not ADVICE.search((ROOT / ".github" / "workflows" / "gate.yml").read_text(encoding="utf-8"))


def test_the_verdict_jobs_are_skipped_when_the_plan_does_not_succeed() -> None:
    """Why a required job name proves nothing here: the verdict job is skipped, and a skipped job is success."""
    jobs = YAML(typ="safe").load((ROOT / ".github" / "workflows" / "gate.yml").read_text(encoding="utf-8"))["jobs"]
    verdict = jobs["verdict"]
    assert "plan" in verdict["needs"] and "needs.plan.result == 'success'" in verdict["if"]
