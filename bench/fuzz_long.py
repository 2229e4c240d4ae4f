"""The longer fuzzing run of docs/fuzzing.md: both property-test fuzzers, many more examples.

* results loader (tests/unit/evidence/test_results_fuzz.py): ``DS4CI_FUZZ_EXAMPLES`` raises every property's
  example count; one pytest run per seed.
* log parser (tests/unit/judging/test_protocol.py::test_fuzz_parser_never_crashes): its count is fixed at 400
  in the test, so the run repeats it with many seeds (each seed is a different 400 examples).

Examples are counted from hypothesis' own statistics (``--hypothesis-show-statistics``): the
"passing" and "failing" test cases of the generate phase (invalid ones, rejected by a filter
before the test body ran, are not counted as tried). Exit status 1 if any run failed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, emit, parser, say

NAME = "fuzz"
STATS = re.compile(r"during generate phase.*?- (\d+) passing, (\d+) failing, and (\d+) invalid", re.S)


def run(target: str, seed: int, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target, f"--hypothesis-seed={seed}",
           "--hypothesis-show-statistics"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    blocks = re.split(r"\n(?=tests/\S+::\S+:\n)", proc.stdout)
    passing = failing = invalid = 0
    for block in blocks:
        m = STATS.search(block)
        if m:
            passing, failing, invalid = passing + int(m[1]), failing + int(m[2]), invalid + int(m[3])
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    return {"target": target, "seed": seed, "returncode": proc.returncode, "seconds": seconds, "passing": passing,
            "failing": failing, "invalid": invalid, "summary": summary,
            "failures": proc.stdout[-4000:] if proc.returncode not in (0,) else ""}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=5000, help="DS4CI_FUZZ_EXAMPLES per results property per seed")
    p.add_argument("--results-seeds", type=int, default=2)
    p.add_argument("--parser-seeds", type=int, default=50, help="seeds x 400 examples of the parser fuzz")
    args = p.parse_args()
    env = dict(os.environ, DS4CI_FUZZ_EXAMPLES=str(args.examples))
    rows = []
    for seed in range(1, args.results_seeds + 1):
        rows.append(run("tests/unit/evidence/test_results_fuzz.py", seed, env))
        say(NAME, f"results loader seed {seed}: {rows[-1]['passing']} passing, {rows[-1]['failing']} failing "
                  f"({rows[-1]['seconds']:.0f} s) -> {rows[-1]['summary']}")
    for seed in range(1, args.parser_seeds + 1):
        rows.append(run("tests/unit/judging/test_protocol.py::test_fuzz_parser_never_crashes", seed, env))
        if seed % 10 == 0 or rows[-1]["returncode"]:
            say(NAME, f"parser seed {seed}: {rows[-1]['passing']} passing, {rows[-1]['failing']} failing "
                      f"-> {rows[-1]['summary']}")
    figures: dict[str, Any] = {"runs": rows}
    suites = (("results", "tests/unit/evidence/test_results_fuzz.py"), ("parser", "tests/unit/judging/test_protocol.py"))
    for label, prefix in suites:
        mine = [r for r in rows if r["target"].startswith(prefix)]
        tried = sum(r["passing"] + r["failing"] for r in mine)
        failed_runs = [r["seed"] for r in mine if r["returncode"] != 0]
        figures[label] = {"examples_tried": tried, "failing_examples": sum(r["failing"] for r in mine),
                          "failed_seeds": failed_runs, "seconds": sum(r["seconds"] for r in mine)}
        say(NAME, f"{label}: {tried} examples tried over {len(mine)} seeds, "
                  f"{figures[label]['failing_examples']} failing examples, failed seeds: {failed_runs or 'none'}")
    emit(NAME, args, figures)
    if any(r["returncode"] for r in rows):
        for r in rows:
            if r["returncode"]:
                print(r["failures"])
        raise SystemExit(1)


if __name__ == "__main__":
    main()
