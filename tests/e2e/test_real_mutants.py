"""The real engine with planted faults on the H200 (docs/benchmarks.md, section 10), judged again offline.

The captures in tests/data/real-server/h200-fork-41ee7d0-designs/ are the sealed bundles of
bench/real_mutants.py's run on lucebox 41ee7d0: the unchanged build and the build without rollback,
each with candidate tiny models of bench/tiny_designs.py. The two of `w16-s015` (design FOURTH, shipped from
2026-12-03 until 2026-12-07) are verified against the config `ds4ci tiny-models --design FOURTH` writes today;
the other candidates' results are read as they were sealed (their targets are not ones ds4ci reads token IDs
from). The H100's unchanged build of 2026-12-07 (tests/data/real-server/h100-2026-12-07-fifth-loud-aligned/)
verifies against the config `ds4ci tiny-models` writes without `--design`.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from gatekit import run_cli
from paths import TESTS

pytest.importorskip("gguf")

DESIGNS = TESTS / "data" / "real-server" / "h200-fork-41ee7d0-designs"
H100 = TESTS / "data" / "real-server" / "h100-2026-12-07-fifth-loud-aligned"


_run = run_cli


def _sealed(name: str, tmp_path: Path) -> dict[str, Any]:
    with tarfile.open(DESIGNS / f"{name}.bundle.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/results.json") and m.name.count("/") == 1)
        doc: dict[str, Any] = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
    return doc


@pytest.fixture(scope="module")
def shipped_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The config of the set these captures ran: FOURTH, by name since 2026-12-07."""
    folder = tmp_path_factory.mktemp("shipped")
    assert _run(["tiny-models", str(folder / "m"), "--seed", "1", "--design", "FOURTH"], folder).returncode == 0
    return folder / "m" / "ds4ci.toml"


def test_the_h100_unchanged_build_verifies_against_the_config_tiny_models_writes_today(tmp_path: Path) -> None:
    folder = tmp_path / "today"
    assert _run(["tiny-models", str(folder), "--seed", "1"], tmp_path).returncode == 0
    done = _run(["verify", str(H100 / "control-96.bundle.tar.gz"), "--expect-config", str(folder / "ds4ci.toml")],
                tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact and consistent; recomputed verdict pass" in done.stdout + done.stderr


def test_the_unchanged_build_passes_with_the_shipped_models(shipped_config: Path, tmp_path: Path) -> None:
    done = _run(["verify", str(DESIGNS / "w16-s015.control.bundle.tar.gz"), "--expect-config", str(shipped_config)],
                tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact and consistent; recomputed verdict pass" in done.stdout + done.stderr
    doc = _sealed("w16-s015.control", tmp_path)
    for width in doc["widths"]:
        assert width["coverage"]["unmet"] == [], width["q"]
        for cell in width["prompts"]:  # acceptance inside the band, so rejections happened and drafts were taken
            assert 0.30 <= cell["matched"] / cell["offered"] <= 0.85 and cell["rejected_drafts"] > 0


def test_the_build_without_rollback_fails_at_every_width_with_the_shipped_models(
        shipped_config: Path, tmp_path: Path) -> None:
    """The build whose rollback branch is never taken: the server still claims full snapshots and prints the
    reference-exact banner, and its answers differ from target-only's at q=2, 3 and 4."""
    done = _run(["verify", str(DESIGNS / "w16-s015.no-rollback.bundle.tar.gz"), "--expect-config", str(shipped_config)],
                tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # intact and consistent, and the verdict it derives is fail
    assert "intact and consistent; recomputed verdict fail" in done.stdout + done.stderr
    doc = _sealed("w16-s015.no-rollback", tmp_path)
    firsts = {}
    for width in doc["widths"]:
        assert width["verdict"] == "fail"
        cells = width["prompts"]
        assert all(c["full_snap_claimed"] and c["banner_claimed"] for c in cells)  # the claim did not save it
        firsts[width["q"]] = min(c["mismatch"]["position"] for c in cells if c["mismatch"])
    assert firsts == {2: 93, 3: 42, 4: 39}


@pytest.mark.parametrize(("design", "caught"), [("w16", []), ("w128-s015", []), ("w32-s015", [3, 4]),
                                                ("w16-s015", [2, 3, 4])])
def test_each_lever_alone_left_the_build_without_rollback_unseen(design: str, caught: list[int], tmp_path: Path) -> None:
    """As sealed on the H200: a 16-row window alone, or loud layers alone, let the answers of the build without
    rollback equal the unchanged build's, counters and all; both together changed them at every width."""
    control, broken = _sealed(f"{design}.control", tmp_path), _sealed(f"{design}.no-rollback", tmp_path)
    assert control["verdict"] == "pass"
    assert [w["q"] for w in broken["widths"] if w["verdict"] != "pass"] == caught
    if not caught:
        counters = [[(c["matched"], c["offered"]) for c in w["prompts"]] for w in control["widths"]]
        assert [[(c["matched"], c["offered"]) for c in w["prompts"]] for w in broken["widths"]] == counters
