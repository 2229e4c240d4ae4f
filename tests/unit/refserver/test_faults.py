"""The planted verifier faults (DS4REF_FAULT): off by default, each changes what it names, fires once,
and leaves the server claiming reference-exact verification."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

pytest.importorskip("gguf")
torch = pytest.importorskip("torch")

from ds4ci.refserver.api import ChatRequest  # noqa: E402
from ds4ci.refserver.args import parse_args  # noqa: E402
from ds4ci.refserver.decoding import Output, Penalties, decode_plain, decode_speculative  # noqa: E402
from ds4ci.refserver.engine import BANNER, Engine, Log, load  # noqa: E402
from ds4ci.refserver.env import EnvError, read_env  # noqa: E402
from ds4ci.refserver.faults import FaultPlan, FaultState, is_near_tie, stale_boundary  # noqa: E402
from ds4ci.refserver.model import Decoder, generate_tensors  # noqa: E402
from ds4ci.refserver.modelfile import Arch, file_sha256  # noqa: E402
from ds4ci.refserver.tinydouble import TinyDraft, TinyTarget, chat_tokens, tiny_piece  # noqa: E402
from ds4ci.tinymodels.bundle import TinySet, tiny_structure  # noqa: E402
from ds4ci.tinymodels.shapes import Shape  # noqa: E402

N_TOKENS = 96


def _run(s: TinySet, q: int, fault: FaultState | None) -> tuple[list[int], list[int], list[int]]:
    target = TinyTarget(s.target, file_sha256(s.target))
    draft = TinyDraft(s.draft, target)
    prompt = chat_tokens([("user", s.prompts[0].read_text(encoding="utf-8"))])
    plain = Output(N_TOKENS, (), tiny_piece)
    decode_plain(target, prompt, plain, 512, Penalties())
    out = Output(N_TOKENS, (), tiny_piece)
    decode_speculative(target, draft, prompt, out, 512, q, True, fault)
    return prompt, plain.ids, out.ids


def test_no_fault_unless_named_and_bad_values_refused() -> None:
    assert read_env({}).fault is None
    plan = read_env({"DS4REF_FAULT": "skip-restore", "DS4REF_FAULT_SEED": "7"}).fault
    assert plan == FaultPlan("skip-restore", 7, None)
    with pytest.raises(EnvError, match="DS4REF_FAULT must be one of near-tie, stale-compressor, skip-restore"):
        read_env({"DS4REF_FAULT": "flip"})
    with pytest.raises(EnvError, match="need DS4REF_FAULT"):
        read_env({"DS4REF_FAULT_SEED": "3"})
    # the seed and the prompt choose the first step; repeats of a prompt fault the same way
    assert plan is not None and plan.arm([1, 2, 3], 0).first_step == plan.arm([1, 2, 3], 5).first_step


def test_near_tie_accepts_the_runner_up_once(successor: TinySet, tmp_path: Path) -> None:
    st = tiny_structure(1, Shape())
    for q in (2,):  # at q=2 each step offers one draft, so the first near-tie the draft misses is where it flips
        log = tmp_path / f"q{q}.jsonl"
        state = FaultState(FaultPlan("near-tie", 1, log), first_step=0, request=0)
        prompt, plain, faulted = _run(successor, q, state)
        assert state.fired_at is not None
        at = next(i for i, (a, b) in enumerate(zip(plain, faulted, strict=True)) if a != b)
        prev = ([*prompt, *plain])[len(prompt) + at - 1]
        # the flip happened between the word's two steps forward (with the shipped layers' 1.2-logit context
        # term, a word the structure has no near-tie at can come within the fault's share of the margin too) ...
        assert {plain[at], faulted[at]} == {st.succ[prev], st.succ[st.succ[prev]]}
        assert faulted[at] == state.details["token"] and plain[at] == state.details["argmax"]  # ... to the runner-up
        assert [json.loads(x)["fault"] for x in log.read_text(encoding="utf-8").splitlines()] == ["near-tie"]
    row = torch.tensor([0.0, 10.0, 9.5, 1.0])
    assert is_near_tie(row, 2) and not is_near_tie(row, 3) and not is_near_tie(torch.tensor([0.0, 10.0, 5.0]), 2)


def test_stale_compressor_keeps_the_rejected_drafts_row(successor: TinySet) -> None:
    assert stale_boundary(start=5, width=3, accepted=0) == 7 and stale_boundary(5, 3, 2) is None
    target = TinyTarget(successor.target, file_sha256(successor.target))
    rows = {}
    for keep in (False, True):
        cache = target.new_cache(32)
        target.forward([300, 301, 302, 303, 304], cache)
        start = cache.snapshot()
        target.forward([305, 306, 307], cache, all_logits=True)  # positions 5..7: block 1 completes at 7
        if keep:
            cache.keep_row(7)
        cache.restore(start)
        target.forward([305, 310, 311, 312], cache)  # the replay: different tokens at 6, 7
        rows[keep] = cache.compressor(4).rows[1].copy()
        pooled = target.token_rows[[300, 301, 302, 303, 304, 305, 310, 311]].mean(axis=0)  # prev: block 0, cur: 1
        assert (cache.compressor(4).rows[1] == pooled).all() != keep
    assert not (rows[False] == rows[True]).all()
    # the Llama-like models: the KV row at the boundary is the rejected batch's
    arch = Arch(vocab=256, dim=32, layers=2, heads=2, ffn=64)
    model = Decoder(arch, generate_tensors(arch, "ab" * 32), torch.float32, torch.device("cpu"))
    cache = model.new_cache(16)
    model.forward([1, 2, 3], cache)
    model.forward([4, 5], cache)
    stale = cache.k[:, 3].clone()
    cache.keep_row(3)
    cache.crop(3)
    model.forward([6], cache)
    fresh = model.new_cache(16)
    model.forward([1, 2, 3, 6], fresh)
    assert torch.equal(cache.k[:, 3], stale) and not torch.equal(fresh.k[:, 3], stale)


def test_stale_compressor_and_skip_restore_fire_once_and_change_the_random_models_answer(random_set: TinySet) -> None:
    for name, q in (("stale-compressor", 4), ("skip-restore", 2)):
        state = FaultState(FaultPlan(name, 1, None), first_step=0, request=0)
        _, plain, faulted = _run(random_set, q, state)
        assert state.fired_at is not None and faulted != plain, name
        if name == "stale-compressor":
            assert state.details["position"] % 4 == 3
    clean = FaultState(FaultPlan("skip-restore", 1, None), first_step=10**6, request=0)  # armed too late: never fires
    _, plain, faulted = _run(random_set, 2, clean)
    assert clean.fired_at is None and faulted == plain


def test_engine_fault_keeps_claiming_reference_exact(successor: TinySet) -> None:
    text = successor.prompts[0].read_text(encoding="utf-8")
    prompt = chat_tokens([("user", text)])
    seed = next(s for s in range(1000) if FaultPlan("near-tie", s, None).arm(prompt, 0).first_step == 0)
    answers = {}
    for fault in (None, "near-tie"):
        env = {"DFLASH_DS4_SPEC": "1", "DFLASH_DS4_DRAFT": str(successor.draft), "DFLASH_DS4_SPEC_Q": "2",
               "DFLASH_DS4_SPEC_REFERENCE_EXACT": "1", "DFLASH_DS4_EXACT_VERIFY_TRACE": "1"}
        if fault:
            env |= {"DS4REF_FAULT": fault, "DS4REF_FAULT_SEED": str(seed)}
        renv = read_env(env)
        stream = io.StringIO()
        engine = Engine(parse_args([str(successor.target), "--target-device", "cpu"]), renv,
                        load(parse_args([str(successor.target), "--target-device", "cpu"]), renv), Log(stream))
        done = engine.complete(ChatRequest("", "", N_TOKENS, None, (), False, Penalties(), (("user", text),)))
        lines = stream.getvalue().splitlines()
        assert BANNER in lines and any(x.startswith("[ds4-exact-verify-trace] reference_exact=1 ") for x in lines)
        answers[fault] = done.ids
    assert answers[None] != answers["near-tie"]
