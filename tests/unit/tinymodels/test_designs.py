"""The successor models' designs by name (``ds4ci tiny-models --design``): each writes the same bytes for the
same seed, the compressor knob changes the compressors' output norms alone, and the aligned prompts roll back
across the compressors' boundaries more often than the shipped ones (simulated over the intended
answers; what the real layers add is measured on the GPU)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from ds4ci.commands.tiny_models import run_tiny_models  # noqa: E402
from ds4ci.errors import UsageError  # noqa: E402
from ds4ci.judging.tinywords import known_target  # noqa: E402
from ds4ci.tinymodels import design, structure  # noqa: E402
from ds4ci.tinymodels.bundle import CHAT_TEMPLATE_TOKENS, TARGET_FILE, tiny_structure, write_tiny_set  # noqa: E402
from ds4ci.tinymodels.shapes import Shape  # noqa: E402
from ds4ci.tinymodels.vocab import SPECIALS  # noqa: E402

FIFTH = ("FIFTH_LOUD", "FIFTH_ALIGNED", "FIFTH_LOUDER", "FIFTH_LOUD_ALIGNED")


def _tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("name", FIFTH)
def test_a_design_writes_the_same_bytes_for_the_same_seed_and_its_target_is_known(name: str, tmp_path: Path) -> None:
    made = design.BY_NAME[name]
    a = _digests(write_tiny_set(tmp_path / "a", 1, design=made).folder)
    b = _digests(write_tiny_set(tmp_path / "b", 1, design=made).folder)
    assert a == b
    assert known_target(a[TARGET_FILE]) is not None, (name, a[TARGET_FILE])  # add it to KNOWN_TARGETS


def test_the_compressor_knob_scales_the_compressors_output_norms_and_nothing_else(tmp_path: Path) -> None:
    fourth = _tensors(write_tiny_set(tmp_path / "fourth", 1, design=design.FOURTH).target)
    loud = _tensors(write_tiny_set(tmp_path / "loud", 1, design=design.FIFTH_LOUD).target)
    assert fourth.keys() == loud.keys()
    norms = {n for n in fourth if n.endswith("compressor_norm.weight")}
    assert norms == {"blk.2.attn_compressor_norm.weight", "blk.2.indexer_compressor_norm.weight",
                     "blk.3.attn_compressor_norm.weight"}  # the ratio-4 layer (with its indexer) and the ratio-128 one
    for n in norms:
        assert np.all(fourth[n] == 1.0) and np.all(loud[n] == 3.0), n
    assert all(np.array_equal(fourth[n], loud[n]) for n in fourth.keys() - norms)  # every draw as it was
    assert design.FIFTH_LOUDER.compressor_norm == 5.0 and design.FOURTH.compressor_norm == 1.0


def test_the_shipped_design_is_fifth_loud_aligned_and_fourth_still_writes_its_recorded_target(tmp_path: Path) -> None:
    assert design.SHIPPED is design.FIFTH_LOUD_ALIGNED
    shipped = write_tiny_set(tmp_path / "s", 1, design=design.SHIPPED)
    assert hashlib.sha256(shipped.target.read_bytes()).hexdigest() == (
        "155283d1ca0a2a93bce1e171ad775736b8d01bff967f930b3b047fa980cd9749")  # the H100 catalogue's (2026-12-07)
    assert [len(p.read_bytes()) for p in shipped.prompts] == [117, 246]
    assert "max_tokens = 96" in shipped.config.read_text(encoding="utf-8").splitlines()
    fourth = write_tiny_set(tmp_path / "f", 1, design=design.BY_NAME["FOURTH"]).target
    assert hashlib.sha256(fourth.read_bytes()).hexdigest() == (
        "77541f4324a8f9d2f1e28110e8dbdf3bfe83f8d3e3d9f065c277b56b53c7dda2")  # the H200 catalogue's (2026-12-04)
    assert design.BY_NAME["FOURTH"] is design.FOURTH and set(FIFTH) < set(design.BY_NAME)


def _rolled_back_boundaries(prompt_tokens: int, q: int, taken: set[int]) -> tuple[int, int, int]:
    """Over the intended 96-token answer from ``</think>`` at width q: the verify steps whose rejected slots hold
    a ratio-4 boundary (p % 4 == 3), those of them that rejected only their last draft, and the steps that
    rejected a ratio-128 boundary and the slot after it."""
    st = tiny_structure(1, Shape(sliding_window=16))
    nxt = {t: st.succ[st.succ[t]] if t in taken else st.succ[t] for t in st.succ}
    answer = structure.greedy_walk(nxt, 256 + SPECIALS.index("</think>"), 96)
    accepted = structure.speculate(answer, {t: st.guess(t) for t in st.succ}, q).accept_lengths
    pos, ratio4, last_only, ratio128 = prompt_tokens, 0, 0, 0
    for a in accepted:
        accept = a + 1  # the seed and the accepted drafts, as the engine counts
        rejected = range(pos + accept, pos + q)
        if any(p % 4 == 3 for p in rejected):
            ratio4 += 1
            last_only += accept == q - 1
        ratio128 += any(p % 128 == 127 and p + 1 in rejected for p in rejected)
        pos += accept
    return ratio4, last_only, ratio128


def test_the_aligned_prompts_roll_back_across_the_compressors_boundaries_more_often() -> None:
    st = tiny_structure(1, Shape(sliding_window=16))
    tokens = {d: [b + CHAT_TEMPLATE_TOKENS for b in d.prompt_bytes] for d in (design.FOURTH, design.FIFTH_ALIGNED)}
    assert tokens[design.FIFTH_ALIGNED] == [121, 250]  # P = 1 and 2 (mod 4); the first steps cross 127 and 255
    for taken in (set(), set(st.near_ties)):  # the layers take no near-tie, or every one
        per_q = {(d, q): [_rolled_back_boundaries(p, q, taken) for p in tokens[d]] for d in tokens for q in (2, 3, 4)}
        for q in (2, 3, 4):
            old, new = ([sum(c) for c in zip(*per_q[d, q], strict=True)] for d in (design.FOURTH, design.FIFTH_ALIGNED))
            assert new[0] >= old[0] and new[1] >= old[1], (bool(taken), q, old, new)
            assert new[2] >= 1 if q > 2 else new[2] == 0, (bool(taken), q, new)  # at q=2 no step rejects two slots
        assert per_q[design.FIFTH_ALIGNED, 3][0][:2] == ((12, 6) if not taken else (10, 3))
        assert per_q[design.FOURTH, 3][0][:2] == ((7, 1) if not taken else (8, 2))


def test_the_command_takes_a_design_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_tiny_models(tmp_path / "m", 1, design="fifth-aligned") == 0
    assert [len((tmp_path / "m" / f"prompt-{i}.txt").read_bytes()) for i in (1, 2)] == [117, 246]
    assert "sha256" in capsys.readouterr().out
    assert run_tiny_models(tmp_path / "d", 1) == 0  # no --design: the shipped FIFTH_LOUD_ALIGNED
    assert run_tiny_models(tmp_path / "n", 1, design="fifth_loud_aligned") == 0
    assert _digests(tmp_path / "d") == _digests(tmp_path / "n")
    assert run_tiny_models(tmp_path / "o", 1, design="fourth") == 0  # the set the 2026-12-04 runs recorded
    assert _digests(tmp_path / "o")[TARGET_FILE] == "77541f4324a8f9d2f1e28110e8dbdf3bfe83f8d3e3d9f065c277b56b53c7dda2"
    assert [len((tmp_path / "o" / f"prompt-{i}.txt").read_bytes()) for i in (1, 2)] == [118, 248]
    with pytest.raises(UsageError, match="--design must be one of FIRST"):
        run_tiny_models(tmp_path / "x", 1, design="no-such-design")
    with pytest.raises(UsageError, match="successor kind only"):
        run_tiny_models(tmp_path / "y", 1, kind="random", design="FOURTH")


def test_the_sixth_candidates_move_the_second_prompt_and_lengthen_the_answer_and_keep_the_shipped_target(
        tmp_path: Path) -> None:
    made = write_tiny_set(tmp_path / "sixth", 1, design=design.BY_NAME["SIXTH"])
    assert [len(p.read_bytes()) for p in made.prompts] == [117, 247]  # P = 121 and 251: a q=2 seed on 255
    assert "max_tokens = 192" in made.config.read_text(encoding="utf-8").splitlines()
    assert made.sha256[TARGET_FILE] == "155283d1ca0a2a93bce1e171ad775736b8d01bff967f930b3b047fa980cd9749"
    assert design.SIXTH_SEEDED.max_tokens == 96 and design.SIXTH_LONG.prompt_bytes == design.SHIPPED.prompt_bytes
    assert design.SHIPPED is not design.SIXTH  # a candidate until a GPU has measured it
