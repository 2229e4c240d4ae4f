"""The successor models' designs by name (``ds4ci tiny-models --design``): each writes the same bytes for the
same seed, the compressor knob changes the compressors' output norms alone, and the aligned prompts put the
ratio-4 boundaries on rejected slots more often at q=3 than the shipped ones (simulated over the intended
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


def test_the_shipped_design_still_writes_its_recorded_target(tmp_path: Path) -> None:
    target = write_tiny_set(tmp_path / "s", 1, design=design.SHIPPED).target
    assert hashlib.sha256(target.read_bytes()).hexdigest() == (
        "77541f4324a8f9d2f1e28110e8dbdf3bfe83f8d3e3d9f065c277b56b53c7dda2")
    assert design.BY_NAME["FOURTH"] is design.FOURTH and set(FIFTH) < set(design.BY_NAME)


def _boundary_steps(prompt_tokens: int, q: int, taken: set[int]) -> tuple[int, int]:
    """Verify steps at width q whose rejected slots hold a ratio-4 boundary (p % 4 == 3), and of those the
    steps that rejected only their last draft, over the intended 96-token answer from ``</think>``."""
    st = tiny_structure(1, Shape(sliding_window=16))
    nxt = {t: st.succ[st.succ[t]] if t in taken else st.succ[t] for t in st.succ}
    answer = structure.greedy_walk(nxt, 256 + SPECIALS.index("</think>"), 96)
    accepted = structure.speculate(answer, {t: st.guess(t) for t in st.succ}, q).accept_lengths
    pos, on_boundary, last_only = prompt_tokens, 0, 0
    for a in accepted:
        accept = a + 1  # the seed and the accepted drafts, as the engine counts
        if accept < q and any(p % 4 == 3 for p in range(pos + accept, pos + q)):
            on_boundary += 1
            last_only += accept == q - 1
        pos += accept
    return on_boundary, last_only


def test_the_aligned_prompts_put_more_ratio4_boundaries_on_rejected_slots_at_q3() -> None:
    st = tiny_structure(1, Shape(sliding_window=16))
    for taken in (set(), set(st.near_ties)):  # the layers take no near-tie, or every one
        for old, new in zip(design.FOURTH.prompt_bytes, design.FIFTH_ALIGNED.prompt_bytes, strict=True):
            assert (new + CHAT_TEMPLATE_TOKENS) % 4 == 1
            before = _boundary_steps(old + CHAT_TEMPLATE_TOKENS, 3, taken)
            after = _boundary_steps(new + CHAT_TEMPLATE_TOKENS, 3, taken)
            assert after[0] >= before[0] and after[1] >= before[1], (bool(taken), old, before, after)
    # 125 and 253 prompt tokens: the first steps still cross the ratio-128 boundaries (positions 127 and 255)
    assert [b + CHAT_TEMPLATE_TOKENS for b in design.FIFTH_ALIGNED.prompt_bytes] == [125, 253]
    assert _boundary_steps(125, 3, set()) == (12, 6) and _boundary_steps(122, 3, set()) == (7, 1)


def test_the_command_takes_a_design_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_tiny_models(tmp_path / "m", 1, design="fifth-aligned") == 0
    assert [len((tmp_path / "m" / f"prompt-{i}.txt").read_bytes()) for i in (1, 2)] == [121, 249]
    assert "sha256" in capsys.readouterr().out
    with pytest.raises(UsageError, match="--design must be one of FIRST"):
        run_tiny_models(tmp_path / "x", 1, design="sixth")
    with pytest.raises(UsageError, match="successor kind only"):
        run_tiny_models(tmp_path / "y", 1, kind="random", design="FOURTH")
