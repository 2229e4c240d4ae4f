"""The reference server's double of the tiny models: it reads the files `ds4ci tiny-models` writes (both
kinds) and serves their direct path and Markov head, so the successor models answer as their structure
intends and the draft agrees partly; the random kind reproduces the first models' zero acceptance."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("gguf")
pytest.importorskip("torch")

from ds4ci.judging.counters import token_steps
from ds4ci.judging.steplines import parse_compare, parse_step_timing, parse_token
from ds4ci.refserver.args import parse_args
from ds4ci.refserver.decoding import Output, Penalties, decode_plain, decode_speculative
from ds4ci.refserver.engine import StartupError, load, step_lines
from ds4ci.refserver.env import read_env
from ds4ci.refserver.modelfile import file_sha256
from ds4ci.refserver.tinydouble import TinyDraft, TinyModelError, TinyTarget, chat_tokens, tiny_piece
from ds4ci.tinymodels import structure
from ds4ci.tinymodels.bundle import TinySet, tiny_structure, write_tiny_set
from ds4ci.tinymodels.shapes import Shape

N_TOKENS = 96


def models(s: TinySet) -> tuple[TinyTarget, TinyDraft]:
    target = TinyTarget(s.target, file_sha256(s.target))
    return target, TinyDraft(s.draft, target)


def prompt_of(s: TinySet, index: int) -> list[int]:
    return chat_tokens([("user", s.prompts[index].read_text(encoding="utf-8"))])


def greedy(target: TinyTarget, prompt: list[int]) -> list[int]:
    out = Output(N_TOKENS, (), tiny_piece)
    decode_plain(target, prompt, out, 512, Penalties())
    return out.ids


def test_successor_answers_walk_the_intended_cycle(successor: TinySet) -> None:
    target, _ = models(successor)
    st = tiny_structure(1, Shape())
    assert target.arch.context_logits == pytest.approx(1.2, rel=0.05)  # 80 x the shipped file's 0.015 layer writes
    assert target.n_swa == 16  # the shipped file's sliding window: the engine-shaped cache's raw ring
    for index in range(len(successor.prompts)):
        prompt = prompt_of(successor, index)
        assert len(prompt) == len(successor.prompts[index].read_bytes()) + 4  # BOS, User, Assistant, </think>
        answer = greedy(target, prompt)
        # every step is the successor, or at a near-tie word the skip: exactly a walk over the intended next map
        nxt = {t: st.succ[t] for t in st.succ}
        prev = prompt[-1]
        for token in answer:
            if token != st.succ[prev]:
                assert prev in st.near_ties and token == st.succ[st.succ[prev]], (prev, token)
                nxt[prev] = token
            prev = token
        assert answer == structure.greedy_walk(nxt, prompt[-1], N_TOKENS)
        assert len(set(answer)) >= 60 and structure.shortest_cycle(answer) is None


def test_successor_draft_agrees_partly_with_every_accept_length(successor: TinySet) -> None:
    target, draft = models(successor)
    prompt = prompt_of(successor, 0)
    answer = greedy(target, prompt)
    st = tiny_structure(1, Shape())
    for q in (2, 3, 4):
        out = Output(N_TOKENS, (), tiny_piece)
        counters = decode_speculative(target, draft, prompt, out, 512, q, exact=True)
        assert out.ids == answer  # reference-exact: greedy's tokens
        assert 0.30 <= counters.matched / counters.offered <= 0.85, (q, counters.matched, counters.offered)
        assert {d.accepted for d in counters.details} == set(range(q))
        # the drafts are the Markov head's chained guesses from the file
        for d in counters.details:
            prev = ([*prompt, *answer])[d.position]
            for slot_draft in d.drafts:
                assert slot_draft == st.guess(prev)
                prev = slot_draft


def test_random_kind_accepts_no_draft_like_the_first_h200_run(random_set: TinySet) -> None:
    target, draft = models(random_set)
    assert target.arch.context_logits == pytest.approx(4.0, rel=0.05)
    prompt = prompt_of(random_set, 0)
    answer = greedy(target, prompt)
    assert min(answer) >= 256 + 7  # only word tokens: the file's byte and special rows are zero
    for q in (2, 4):
        out = Output(N_TOKENS, (), tiny_piece)
        counters = decode_speculative(target, draft, prompt, out, 512, q, exact=True)
        assert out.ids == answer and counters.matched == 0 and counters.steps == N_TOKENS - 1


def test_step_lines_parse_back_and_agree_with_the_loop(successor: TinySet) -> None:
    target, draft = models(successor)
    prompt = prompt_of(successor, 1)
    out = Output(N_TOKENS, (), tiny_piece)
    counters = decode_speculative(target, draft, prompt, out, 512, 4, exact=True)
    lines = step_lines(counters.details, timing=True, tokens=True)
    compare = [parse_compare(x.partition(" ")[2]) for x in lines if x.startswith("[ds4-spec-cmp] ")]
    timing = [parse_step_timing(x.partition(" ")[2]) for x in lines if x.startswith("[ds4-spec-t] ")]
    tokens = [parse_token(x.partition(" ")[2]) for x in lines if x.startswith("[ds4-spec-token] ")]
    assert [c.accepted for c in compare] == [d.accepted for d in counters.details[:8]]
    assert compare[0].position == len(prompt)  # the first verify batch starts at the first generated token
    assert [t.step for t in timing] == [1, 2, 3, 4, *range(32, counters.steps + 1, 32)]
    assert [t.token for t in tokens] == out.ids[1:]  # every token after the first, in order
    steps, problems = token_steps(tokens, 4)
    assert problems == [] and [s.accepted for s in steps[:-1]] == [d.accepted for d in counters.details[:-1]]
    assert sum(d.accepted for d in counters.details) == counters.matched
    assert step_lines(counters.details, timing=False, tokens=False) == []
    # the compare line has three draft slots: wider steps print only their timing lines
    wide = decode_speculative(target, draft, prompt, Output(N_TOKENS, (), tiny_piece), 512, 5, exact=True)
    shown = step_lines(wide.details, timing=True, tokens=False)
    assert shown and all(x.startswith("[ds4-spec-t] ") for x in shown)


def test_server_loads_the_double_for_a_tiny_gguf_and_refuses_other_gguf(
        successor: TinySet, random_set: TinySet, tmp_path: Path) -> None:
    args = parse_args([str(successor.target), "--target-device", "cpu"])
    env = read_env({"DFLASH_DS4_SPEC": "1", "DFLASH_DS4_DRAFT": str(successor.draft)})
    loaded = load(args, env)
    assert isinstance(loaded.target, TinyTarget) and isinstance(loaded.draft, TinyDraft)
    assert loaded.piece(300) == " w300"
    other = write_tiny_set(tmp_path / "other", seed=2)
    mismatched = load(args, read_env({"DFLASH_DS4_SPEC": "1", "DFLASH_DS4_DRAFT": str(other.target)}))
    assert mismatched.draft is None and mismatched.draft_error is not None
    assert "tiny-models" in mismatched.draft_error or "draft of" in mismatched.draft_error
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(StartupError, match="GGUF"):
        load(parse_args([str(bad), "--target-device", "cpu"]), read_env({}))
    with pytest.raises(TinyModelError, match="is not the draft of 'ds4ci-tiny-successor'"):
        TinyDraft(random_set.draft, models(successor)[0])
