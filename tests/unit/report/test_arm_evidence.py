"""The comment and the commit status name each arm's parity oracle and the lines its server printed (real capture)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from paths import TESTS

from ds4ci.evidence.derive import derive
from ds4ci.github.publish import _description
from ds4ci.report import render
from ds4ci.report.docview import view_of

FORK = TESTS / "data" / "real-server" / "h200-fork-41ee7d0" / "gate.bundle.tar.gz"
# The fork build 41ee7d0 with the successor tiny models, run from a folder that is no git checkout: a pass.
PASSING = TESTS / "data" / "real-server" / "h200-fork-successor" / "41ee7d0.successor.bundle.tar.gz"


def _derived(tmp_path: Path, bundle: Path = FORK):  # type: ignore[no-untyped-def]
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path, filter="data")
    (attempt,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return derive(attempt)


def test_the_comment_shows_one_short_line_per_arm(tmp_path: Path) -> None:
    body, _ = render.render([_derived(tmp_path)], kind="comment")
    assert (
        "**Evidence per arm** (where the token IDs came from, counters, lines the server printed): "
        "target-only: tiny-model words; none of the known lines · q=2: tiny-model words, counters derived; "
        "banner x4, summary-plain x4 · q=3: "
    ) in body


def test_the_status_names_the_oracle(tmp_path: Path) -> None:
    doc = _derived(tmp_path, PASSING)
    assert doc["verdict"] == "pass"
    assert _description(view_of(doc), "success") == (
        "pass: token parity at q=2,3,4, 96 tokens (token IDs from the tiny model's words)")
