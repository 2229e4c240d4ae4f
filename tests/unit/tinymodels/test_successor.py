"""The successor tiny models: the structure is read back from the written weights (gguf's reader and
dequantizer) and the intended behaviour computed from them with numpy, for every token a prompt can
end with. What the real forward adds (the layers' small writes) is measured on the GPU only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from ds4ci.judging import coverage, coverpolicy  # noqa: E402
from ds4ci.judging.specsteps import COMPARE, TIMING, SpecStep  # noqa: E402
from ds4ci.tinymodels import design, structure  # noqa: E402
from ds4ci.tinymodels.bundle import DRAFT_FILE, TARGET_FILE, tiny_structure, write_tiny_set  # noqa: E402
from ds4ci.tinymodels.shapes import Shape  # noqa: E402
from ds4ci.tinymodels.vocab import SPECIALS  # noqa: E402

SHAPE = Shape()
FIRST_WORD = 256 + len(SPECIALS)
MASK = 256 + SPECIALS.index("<｜mask｜>")
N_TOKENS = 96


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_set(tmp_path_factory.mktemp("succ"), seed=1).folder


def _tensor(path: Path, name: str) -> np.ndarray:
    reader = gguf.GGUFReader(path)
    t = next(t for t in reader.tensors if t.name == name)
    values: np.ndarray = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    return values


@pytest.fixture(scope="module")
def target_logits(models: Path) -> np.ndarray:
    """logits[t] = output . rms_norm(embedding[t]): the direct path, for every token t."""
    emb = _tensor(models / TARGET_FILE, "token_embd.weight")
    out = _tensor(models / TARGET_FILE, "output.weight")
    normed = emb / np.sqrt((emb * emb).mean(axis=1, keepdims=True))
    logits: np.ndarray = normed @ out.T
    return logits


@pytest.fixture(scope="module")
def markov_bias(models: Path) -> np.ndarray:
    """bias[prev] = w2 . w1[prev], the Markov head's correction for each previous token."""
    w1 = _tensor(models / DRAFT_FILE, "dflash.dspark.markov.w1")
    w2 = _tensor(models / DRAFT_FILE, "dflash.dspark.markov.w2")
    bias: np.ndarray = w1 @ w2.T
    return bias


def _starts() -> list[int]:
    return [t for t in range(SHAPE.n_vocab) if t != MASK]


def test_target_head_gives_each_token_its_successor_with_a_wide_margin(target_logits: np.ndarray) -> None:
    st = tiny_structure(1, SHAPE)
    order = np.argsort(-target_logits, axis=1)
    top = target_logits[np.arange(SHAPE.n_vocab), order[:, 0]]
    third = target_logits[np.arange(SHAPE.n_vocab), order[:, 2]]
    for t in _starts():
        if t < FIRST_WORD:
            assert order[t, 0] == st.succ[t], t
        elif t in st.near_ties:  # successor and skip within a logit or two: the layers decide
            assert {order[t, 0], order[t, 1]} == {st.succ[t], st.succ[st.succ[t]]}, t
        else:  # the runner-up is the skip, a step forward too
            assert [order[t, 0], order[t, 1]] == [st.succ[t], st.succ[st.succ[t]]], t
    words = np.arange(FIRST_WORD, SHAPE.n_vocab)
    assert (top[words] - third[words]).min() > 8.0  # nothing else comes near either step (the layers: under 1)
    assert not target_logits[:, :FIRST_WORD].any()  # bytes and specials are never generated


def _next_map(logits: np.ndarray, skip: set[int]) -> dict[int, int]:
    """Greedy next token by the weights; at the ``skip`` tokens the runner-up instead."""
    order = np.argsort(-logits, axis=1)[:, :2]
    return {t: int(order[t, 1] if t in skip else order[t, 0]) for t in _starts()}


def test_every_greedy_continuation_is_long_and_varied(target_logits: np.ndarray) -> None:
    near = set(tiny_structure(1, SHAPE).near_ties)
    assert near  # the layers have near-ties to decide
    for skip in (set(), near):
        nxt = _next_map(target_logits, skip)
        for start in _starts():
            walk = structure.greedy_walk(nxt, start, N_TOKENS)
            assert len(set(walk)) >= 60 and len(set(walk)) == N_TOKENS, start
            assert structure.shortest_cycle(walk) is None, start


def test_draft_agrees_often_but_not_always_with_every_accept_length(
        target_logits: np.ndarray, markov_bias: np.ndarray) -> None:
    guess = {t: int(np.argmax(markov_bias[t])) for t in _starts()}
    st = tiny_structure(1, SHAPE)
    assert all(guess[t] == st.guess(t) for t in _starts())
    sorted_bias = np.sort(markov_bias[FIRST_WORD:], axis=1)
    assert (sorted_bias[:, -1] - sorted_bias[:, -2]).min() > 20.0  # outvotes the draft's own logits
    near = set(st.near_ties)
    rates: dict[int, list[float]] = {2: [], 3: [], 4: []}
    for skip in (set(), near):
        nxt = _next_map(target_logits, skip)
        for start in _starts():
            answer = structure.greedy_walk(nxt, start, N_TOKENS)
            for q, values in rates.items():
                run = structure.speculate(answer, guess, q)
                values.append(run.matched / run.offered)
                assert set(run.accept_lengths) == set(range(q)), (start, q)
    for q, values in rates.items():
        assert min(values) >= 0.30 and max(values) <= 0.85, (q, min(values), max(values))
    assert np.mean(rates[2]) > np.mean(rates[3]) > np.mean(rates[4])


def test_layers_write_back_as_designed_and_the_random_kind_is_unchanged(models: Path, tmp_path: Path) -> None:
    out_b = _tensor(models / TARGET_FILE, "blk.0.attn_output_b.weight")
    assert abs(out_b.std() - design.SHIPPED.layer_out_std) < 0.1 * design.SHIPPED.layer_out_std  # small, not zero
    assert design.SHIPPED.layer_out_std < 0.05  # the direct path still decides every word but the near-ties
    old = write_tiny_set(tmp_path / "old", seed=1, kind="random")
    reader = gguf.GGUFReader(old.target)
    assert bytes(reader.fields["general.name"].contents(), "utf-8") == b"ds4ci-tiny-random"
    # the first models' pinned SHA-256s (docs/real-server.md): --kind random still writes them
    assert old.sha256[TARGET_FILE] == "340fd97fff73dc755f918f8bd0e89ea37b3430c4fb66b81c903e05fd5a40b360"
    assert old.sha256[DRAFT_FILE] == "bca31eb8808c63a810899b31fb6e2249b2c042bed0c0cd9958e077c23ad93b5d"
    assert old.sha256["prompt-1.txt"] == "a5dd14b0456f11efa31284e92cd78176f5e64a72cec8c5398922db500f8a9b47"
    assert "require_coverage" not in old.config.read_text(encoding="utf-8")  # the first models' config as it was
    assert gguf.GGUFReader(models / TARGET_FILE).fields["general.name"].contents() == "ds4ci-tiny-successor"


def test_first_eight_steps_exercise_every_minimum_at_every_width(models: Path) -> None:
    """What the 41ee7d0 build prints (compare lines for the first 8 steps, timing lines for steps 1-4 and
    every 32nd), simulated over the intended answers, meets every coverage minimum at q=2, 3, 4."""
    st = tiny_structure(1, SHAPE)
    guess = {t: st.guess(t) for t in st.succ}
    assert [len((models / f"prompt-{i}.txt").read_bytes()) for i in (1, 2)] == [117, 246]  # FIFTH_LOUD_ALIGNED's
    for sizes in ([117, 246], list(design.FOURTH.prompt_bytes)):  # the shipped prompts and FOURTH's (118, 248)
        _assert_first_eight_steps_cover(st, guess, sizes)


def _assert_first_eight_steps_cover(st: structure.Structure, guess: dict[int, int], sizes: list[int]) -> None:
    for start in (256 + SPECIALS.index("</think>"), 256 + SPECIALS.index("<think>")):  # the template's endings
        for skip in (set(), set(st.near_ties)):
            nxt = {t: st.succ[st.succ[t]] if t in skip else st.succ[t] for t in st.succ}
            for q in (2, 3, 4):
                requests = []
                for size in sizes:
                    accepted = structure.speculate(structure.greedy_walk(nxt, start, N_TOKENS), guess, q).accept_lengths
                    steps, pos = [], size + 4  # BOS, User, Assistant and the ending around the prompt's bytes
                    for k, a in enumerate(accepted):
                        if k < 8:
                            steps.append(SpecStep(k, pos, q, a, COMPARE))
                        if k < 4 or (k + 1) % 32 == 0:
                            steps.append(SpecStep(k + 1, None, q, a, TIMING))
                        pos += a + 1
                    requests.append(coverage.RequestSteps(steps, size + 4))
                assert coverpolicy.unmet(coverage.width_coverage(q, requests)) == [], (start, bool(skip), q)


def test_near_ties_sit_at_every_unknown_word_and_a_third_of_the_known_ones_past_the_first_block() -> None:
    st = tiny_structure(1, SHAPE)
    first_block = structure.FIRST_BLOCK
    assert first_block == len(structure.FIRST_RUNS) + sum(structure.FIRST_RUNS) == 22
    assert not set(st.cycle[:first_block]) & st.near_ties  # the steps a build prints: the intended walk
    later = st.cycle[first_block:]
    unknown = [w for w in later if w not in st.known]
    known = [w for w in later if w in st.known]
    assert unknown and set(unknown) <= st.near_ties  # there the draft guesses the skip
    assert 0.25 < len(set(known) & st.near_ties) / len(known) < 0.42  # about one in three
    assert st.near_tie_gap == structure.NEAR_TIES.gap == 0.1
    # the second set (one word in six, known or not, first block included) is still written the same way
    second = tiny_structure(1, SHAPE, structure.SECOND_NEAR_TIES)
    assert second.known == st.known and second.cycle == st.cycle
    assert 0.12 < len(second.near_ties) / len(second.cycle) < 0.22 and set(second.cycle[:first_block]) & second.near_ties


def test_kind_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind must be one of successor, random"):
        write_tiny_set(tmp_path, 1, kind="other")
