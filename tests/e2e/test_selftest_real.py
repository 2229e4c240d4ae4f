"""``ds4ci selftest --server-bin`` and ``ds4ci tiny-models`` as the CLI, and ``verify`` of our real H200 bundles.

The server binary here is the simulator (a real process on loopback): it speaks the protocol with
the reference-exact mode, so the tiny models' gate passes. The real dflash_server's run is in
tests/data/real-server/h200-62880e2/ (docs/real-server.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gatekit import run_cli, sim_wrapper
from paths import TESTS

pytest.importorskip("gguf")

CAPTURES = TESTS / "data" / "real-server" / "h200-62880e2"


_run = run_cli


def test_selftest_with_a_server_binary_runs_the_tiny_models_through_the_gate(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    wrapper = sim_wrapper(tmp_path / "bin")
    # The simulator answers any model alike, so it cannot walk the successor models' structure: the random
    # models (whose config requires no coverage) here; the coverage policy on the successor models below.
    done = _run(["selftest", "--server-bin", str(wrapper), "--workdir", str(tmp_path / "work"), "--runner", "st",
                 "--kind", "random"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "gate verdict: pass (exit 0)" in out
    for key in ("target-only", "q2", "q3", "q4"):
        assert f"  {key}: ready " in out and "4/4 answered" in out
    # the simulator prints the trace: the gate reads the IDs from it (the strongest oracle), per arm
    assert "arms, as the gate judged them:" in out
    assert "  target-only: pass; parity oracle: server token trace; lines: trace x4" in out
    for q in (2, 3, 4):
        assert f"  q{q}: pass; parity oracle: server token trace; counters printed (prompt 0: matched " in out
    assert (tmp_path / "work" / "models" / "ds4ci.toml").is_file()


def test_the_successor_models_require_coverage_that_a_server_without_their_structure_lacks(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    wrapper = sim_wrapper(tmp_path / "bin")
    done = _run(["selftest", "--server-bin", str(wrapper), "--workdir", str(tmp_path / "work"), "--runner", "st"], tmp_path)
    # parity holds, but the simulator's drafts never cross the boundaries these prompts were made to reach:
    # the proof was not shown, so no verdict (never a pass, and never a fail: the answers did not differ)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "gate verdict: error (exit 3)" in done.stdout
    assert "coverage minimum 'a ratio-128 boundary batch' not met" in done.stderr
    assert "require_coverage = true" in (tmp_path / "work" / "models" / "ds4ci.toml").read_text(encoding="utf-8")


def test_selftest_refuses_a_missing_binary(tmp_path: Path) -> None:
    done = _run(["selftest", "--server-bin", str(tmp_path / "nope")], tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr


def test_tiny_models_cli_writes_a_pinned_set(tmp_path: Path) -> None:
    done = _run(["tiny-models", str(tmp_path / "m"), "--seed", "4"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "ds4-tiny-dspark.gguf", "ds4-tiny-target.gguf", "ds4ci.toml", "prompt-1.txt", "prompt-2.txt"]
    assert _run(["tiny-models", str(tmp_path / "x"), "--seed", "-1"], tmp_path).returncode == 2
    bad = _run(["tiny-models", str(tmp_path / "y"), "--kind", "other"], tmp_path)
    assert bad.returncode == 2 and "--kind must be one of successor, random" in bad.stderr
    old = _run(["tiny-models", str(tmp_path / "old"), "--kind", "random"], tmp_path)
    # the first models, as docs/real-server.md pins them
    assert old.returncode == 0 and "340fd97fff73dc755f918f8bd0e89ea37b3430c4fb66b81c903e05fd5a40b360" in old.stdout


def test_verify_of_the_first_fork_capture_agrees_its_widths_pass_and_its_tree_was_modified(tmp_path: Path) -> None:
    """The fork build 41ee7d0 on the H200 (banner, counterless summaries, the random tiny models): intact and
    consistent; every width passes, and the run is an error because it ran in a modified ds4ci checkout."""
    fork = TESTS / "data" / "real-server" / "h200-fork-41ee7d0" / "gate.bundle.tar.gz"
    done = _run(["verify", str(fork)], tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "intact and consistent; recomputed verdict error" in done.stdout + done.stderr


@pytest.mark.parametrize("name", ["public", "fixed-verify"])
def test_verify_of_the_real_bundles_agrees_no_verdict(name: str, tmp_path: Path) -> None:
    done = _run(["verify", str(CAPTURES / f"{name}.bundle.tar.gz")], tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr  # intact and consistent; the gate reached no verdict
    assert "intact and consistent; recomputed verdict error" in done.stdout + done.stderr


FIRST_SUCCESSOR = TESTS / "data" / "real-server" / "h200-fork-successor"  # the first successor models (2026-12-01)
SECOND_SUCCESSOR = TESTS / "data" / "real-server" / "h200-fork-successor-2"  # near-ties the layers decide (2026-12-02)
SUCCESSOR = TESTS / "data" / "real-server" / "h200-fork-successor-3"  # the third set: half the words near-ties


@pytest.mark.parametrize("build", ["41ee7d0", "66b226b"])
def test_verify_of_the_real_fork_builds_with_the_first_successor_models_passes(build: str, tmp_path: Path) -> None:
    """The fork build (41ee7d0, and its tip 66b226b) on the H200 with the first successor tiny models: intact,
    consistent and passing when verified offline against the config of that set (require_coverage on)."""
    from ds4ci.tinymodels import design
    from ds4ci.tinymodels.bundle import write_tiny_set

    config = write_tiny_set(tmp_path / "m", 1, design=design.FIRST).config
    bundle = FIRST_SUCCESSOR / f"{build}.successor.bundle.tar.gz"
    done = _run(["verify", str(bundle), "--expect-config", str(config)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact and consistent; recomputed verdict pass" in done.stdout + done.stderr


def test_verify_of_the_real_fork_build_with_the_second_successor_models_passes(tmp_path: Path) -> None:
    """41ee7d0 on the H200 with the second successor set (one word in six a near-tie), verified against its config."""
    from ds4ci.tinymodels import design
    from ds4ci.tinymodels.bundle import write_tiny_set

    config = write_tiny_set(tmp_path / "m", 1, design=design.SECOND).config
    done = _run(["verify", str(SECOND_SUCCESSOR / "41ee7d0.successor.bundle.tar.gz"), "--expect-config", str(config)],
                tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact and consistent; recomputed verdict pass" in done.stdout + done.stderr


def test_verify_of_the_real_fork_build_with_the_third_successor_models_passes(tmp_path: Path) -> None:
    """41ee7d0 on the H200 with what `ds4ci tiny-models` wrote until 2026-12-03, verified against that set's config."""
    from ds4ci.tinymodels import design
    from ds4ci.tinymodels.bundle import write_tiny_set

    config = write_tiny_set(tmp_path / "m", 1, design=design.THIRD).config
    done = _run(["verify", str(SUCCESSOR / "41ee7d0.successor.bundle.tar.gz"), "--expect-config", str(config)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact and consistent; recomputed verdict pass" in done.stdout + done.stderr


def _results(bundle: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    import json
    import tarfile

    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path, filter="data")
    (attempt,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return attempt, json.loads((attempt / "results.json").read_text(encoding="utf-8"))


# The widths whose run rejected a batch at the ratio-128 boundary and at the window's edge (the build prints
# per-step lines for the first steps only): every width with the first and the third models; with the second
# set their answers moved (the layers took some skips), and at q=2 no printed step rejected at those two.
@pytest.mark.parametrize(("folder", "far_edges"),
                         [(FIRST_SUCCESSOR, (2, 3, 4)), (SECOND_SUCCESSOR, (3, 4)), (SUCCESSOR, (2, 3, 4))],
                         ids=["first", "second", "third"])
def test_the_real_successor_run_exercised_every_slot_and_both_boundaries(
        folder: Path, far_edges: tuple[int, ...], tmp_path: Path) -> None:
    _, doc = _results(folder / "41ee7d0.successor.bundle.tar.gz", tmp_path)
    assert doc["verdict"] == "pass" and doc["settings"]["require_coverage"] is True
    for width in doc["widths"]:
        q, cov = width["q"], width["coverage"]
        assert cov["unmet"] == [] and all(n > 0 for n in cov["accept_histogram"]), (q, cov)
        assert all(n > 0 for n in cov["rejections_per_slot"])
        assert cov["boundaries"]["ratio4"]["rejected"] > 0, (q, cov)
        edges = cov["boundaries"]["ratio128"]["rejected"] > 0 and cov["boundaries"]["window"]["rejected"] > 0
        assert edges == (q in far_edges), (q, cov)
        for cell in width["prompts"]:  # acceptance partial: inside the band the successor models were made for
            assert 0.30 <= cell["matched"] / cell["offered"] <= 0.85, (q, cell["matched"], cell["offered"])


# (capture, near-ties, near-tie words met and skips taken in each prompt's answer, whether the prompts' answers part)
_DECIDED = {"second": (SECOND_SUCCESSOR, "SECOND_NEAR_TIES", ((16, 10), (15, 8)), True),
            "third": (SUCCESSOR, "NEAR_TIES", ((47, 24), (47, 24)), False)}


@pytest.mark.parametrize("which", sorted(_DECIDED))
def test_on_the_real_build_the_layers_decide_the_near_ties(which: str, tmp_path: Path) -> None:
    """The real kernels took the skip at some near-tie words and not at others: what the cache holds changes
    the answer, so a rollback that leaves it wrong can show (with the second set the two prompts' answers
    part too; the third set has no near-ties where the answers start, and there the layers chose alike for
    both). Every step is still the successor, or the skip at a near-tie word."""
    import json

    from ds4ci.judging.tinywords import ids_from_text
    from ds4ci.tinymodels import structure
    from ds4ci.tinymodels.bundle import tiny_structure
    from ds4ci.tinymodels.shapes import Shape

    folder, ties_name, expected, part = _DECIDED[which]
    st = tiny_structure(1, Shape(), getattr(structure, ties_name))
    attempt, _ = _results(folder / "41ee7d0.successor.bundle.tar.gz", tmp_path)
    answers = []
    for prompt in ("p0", "p1"):
        body = json.loads((attempt / "requests" / "target-only" / f"{prompt}-r1.response.json").read_text())
        ids = ids_from_text(body["choices"][0]["message"]["content"])
        assert ids is not None and len(ids) == 96 and len(set(ids)) == 96
        skips = [i for i in range(1, len(ids)) if ids[i] != st.succ[ids[i - 1]]]
        assert all(ids[i - 1] in st.near_ties and ids[i] == st.succ[st.succ[ids[i - 1]]] for i in skips), skips
        ties = [i for i in range(1, len(ids)) if ids[i - 1] in st.near_ties]
        assert skips and len(skips) < len(ties), (skips, ties)  # the layers went both ways
        answers.append(ids)
        assert (len(ties), len(skips)) == expected[len(answers) - 1]
    assert (answers[0] != answers[1]) == part
