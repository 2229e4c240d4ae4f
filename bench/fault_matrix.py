#!/usr/bin/env python3
"""Run every fault case (tests/faults/cases.py) and write docs/faults.md with what was observed.

    .venv/bin/python bench/fault_matrix.py            # prints the table
    .venv/bin/python bench/fault_matrix.py --write    # also rewrites docs/faults.md

The same cases are asserted by tests/faults/test_fault_matrix.py; this script records the outcomes.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "faults"))

from cases import CASES, Case, Outcome, run_default  # noqa: E402
from gatekit import Workspace  # noqa: E402

from ds4ci.supervisor import sandbox  # noqa: E402

# Publishing and results-file faults are exercised by the publish tests against the stateful fake API.
PUBLISH_CASES = [
    ("publish: 500s, then success", "tests/e2e/test_publish.py", "statuses and comment land after retries"),
    ("publish: secondary rate limit with Retry-After", "tests/e2e/test_publish.py", "waits as told, then lands"),
    ("publish: read-only token (fork PR)", "tests/e2e/test_publish.py", "exit 3, two-stage workaround named, summary kept"),
    ("results file malformed / oversized", "tests/e2e/test_publish.py, tests/unit/evidence/test_results_fuzz.py",
     "exit 2, nothing posted"),
    ("results claim a different head", "tests/e2e/test_publish.py", "exit 2, refused as stale, nothing green"),
]


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def first_line_with(reasons: str, needle: str) -> str:
    for line in reasons.splitlines():
        if needle and needle in line:
            return line.strip()[:140]
    return (reasons.strip().splitlines() or [""])[0][:140]


def judge(case: Case, outcome: Outcome) -> bool:
    attempts_ok = (len(outcome.evidence["attempts"]) == 1) if case.expect_attempt_left else not outcome.evidence["attempts"]
    return (
        outcome.code == case.expect_code
        and outcome.verdict == case.expect_verdict
        and case.expect_text in outcome.reasons
        and not outcome.leftovers
        and attempts_ok
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite docs/faults.md")
    args = parser.parse_args()
    # The cases' servers are Python programs run by this venv: shown read-only to the sandbox, as the tests do.
    os.environ.update(sandbox.runtime_environment(os.environ))
    rows = []
    ok_all = True
    started = time.monotonic()
    for case in CASES:
        with tempfile.TemporaryDirectory(prefix="ds4ci-fault-") as tmp:
            outcome = (case.run or run_default)(Workspace.create(Path(tmp)), case)
        ok = judge(case, outcome)
        ok_all &= ok
        message = first_line_with(outcome.reasons, case.expect_text) if case.expect_text else "re-run passed"
        listing = outcome.evidence
        kept = f"runs {len(listing['runs'])}, failed {len(listing['failed'])}, attempts {len(listing['attempts'])}"
        rows.append(
            f"| {cell(case.name)} | {case.clause} | {outcome.verdict or '(no results)'} | {outcome.code} | "
            f"{len(outcome.leftovers)} | {kept} | {'yes' if ok else '**NO**'} | {cell(message)} |"
        )
        print(f"{'ok ' if ok else 'BAD'} {case.name}: exit {outcome.code} {outcome.verdict}", flush=True)
    elapsed = time.monotonic() - started
    header = [
        "# Fault matrix",
        "",
        "Each row is a real `ds4ci gate` process against real server processes (the bundled simulator with a",
        "fault switch, a foreign protocol speaker, or a hostile wrapper), asserted by",
        "`tests/faults/test_fault_matrix.py` and recorded here by:",
        "",
        "    .venv/bin/python bench/fault_matrix.py --write",
        "",
        f"Recorded {date.today().isoformat()} on {platform.node() or 'this machine'} "
        f"(Python {platform.python_version()}, {len(CASES)} cases in {elapsed:.0f} s).",
        "",
        "Columns: *clause* is the exactness contract clause of docs/protocol.md (or the lifecycle/evidence guarantee)",
        "the case attacks; *left over* counts processes still running that mention the test's directory after",
        "the gate exited; *evidence* counts promoted passing runs, failed attempts kept with their diagnostics,",
        "and unpromoted attempt directories (only a SIGKILLed or unsealable run may leave one, never a partial",
        "final directory); *as expected* compares with the expected verdict, exit code and message.",
        "",
        "| case | clause | verdict | exit | left over | evidence | as expected | message |",
        "| --- | --- | --- | ---: | ---: | --- | :---: | --- |",
    ]
    footer = [
        "",
        "Notes:",
        "- *server ignores SIGTERM* and *forks a helper*: the whole process group is killed after",
        "  `--stop-timeout`; a server that needed SIGKILL gives no trustworthy verdict, so the width is `error`.",
        "- *ds4ci killed (SIGKILL) mid-run*: the killed attempt stays in `attempts/` (the server died with it",
        "  through the parent-death signal); the re-run passes and is promoted beside it, nothing is replaced.",
        "- *evidence directory not writable*: root ignores permission bits, so the case points the evidence",
        "  directory below a regular file; *disk full* sets `RLIMIT_FSIZE` on the gate so writes fail with EFBIG.",
        "",
        "Publishing and untrusted results files are covered by the publish tests against the stateful fake",
        "GitHub API:",
        "",
        "| case | tests | outcome |",
        "| --- | --- | --- |",
        *[f"| {a} | `{b}` | {c} |" for a, b, c in PUBLISH_CASES],
        "",
    ]
    text = "\n".join([*header, *rows, *footer])
    print(text)
    if args.write:
        (ROOT / "docs" / "faults.md").write_text(text)
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
