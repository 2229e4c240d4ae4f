"""ds4ci-sim as a real process on loopback: protocol, toy model, fault switches, lifecycle."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests
from paths import ROOT, TESTS

from ds4ci.simulator import model
from ds4ci.simulator.card import ModelCard
from ds4ci.simulator.engine import Engine
from ds4ci.simulator.faults import FAILURE_LINES, FAULTS, Arm, parse_faults
from ds4ci.simulator.load import load_settings
from ds4ci.simulator.logs import BANNER, Log
from ds4ci.simulator.request import parse_request, render_chat
from ds4ci.simulator.settings import parse_args, read_knobs
from tests.simproc import (
    SUMMARY,
    Sim,
    SimExited,
    ask,
    banners,
    chat_body,
    child_env,
    common_env,
    free_port,
    kill_group,
    make_models,
    sim_command,
    spec_env,
    start_sim,
    stop_sim,
    summaries,
    trace_ids,
    traces,
    wait_log,
)

PROMPT = "Explain, step by step, why reference-exact speculative decoding must match greedy decoding.\n"
OTHER_PROMPT = "List three prime numbers and say why they are prime."
UPSTREAM_LINES = TESTS / "data" / "real-server" / "upstream-gate-lines.txt"
Starter = Callable[..., Sim]


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[Starter]:
    """Start simulators; every one (and its process group) is gone after the test."""
    started: list[Sim] = []

    def start(env: Mapping[str, str] | None = None, args: Sequence[str] | None = None, **kw: Any) -> Sim:
        sim = start_sim(tmp_path, env=env, args=args, **kw)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        kill_group(sim)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """One target-only server shared by the read-only tests of this module."""
    sim = start_sim(tmp_path_factory.mktemp("plain"), env=common_env())
    yield sim
    kill_group(sim)


@pytest.fixture(scope="module")
def reference(plain: Sim) -> dict[str, list[int]]:
    """Target-only greedy tokens for PROMPT and OTHER_PROMPT at 96 tokens, from a real server."""
    out = {}
    for prompt in (PROMPT, OTHER_PROMPT):
        response, lines = ask(plain, prompt)
        assert response.status_code == 200
        (trace,) = traces(lines)
        assert trace.group("ref") == "0" and trace.group("spec") == "0"
        assert summaries(lines) == [] and banners(lines) == []
        out[prompt] = trace_ids(trace)
    return out


def one_trace(lines: list[str]) -> list[int]:
    (trace,) = traces(lines)
    ids = trace_ids(trace)
    assert int(trace.group("n")) == len(ids)
    return ids


def counters(line: str) -> dict[str, int]:
    match = SUMMARY.match(line)
    assert match, line
    return {k: int(match.group(k)) for k in ("gen", "steps", "matched", "offered", "q", "snap")}


def flags(lines: list[str]) -> tuple[str, str]:
    (trace,) = traces(lines)
    return trace.group("ref"), trace.group("spec")


def upstream(kind: str) -> list[str]:
    """The upstream gate's example lines of one kind (PASS-TRACE, BANNER, PASS-SUMMARY, ...)."""
    rows = [line.split("\t", 1) for line in UPSTREAM_LINES.read_text(encoding="utf-8").splitlines() if "\t" in line]
    return [text for label, text in rows if label == kind]


def keys(line: str) -> list[str]:
    return re.findall(r"(\w+)=", line)


# --- the contract's happy path ------------------------------------------------------------------


@pytest.mark.parametrize("q", [2, 3, 4])
def test_reference_exact_equals_target_only_with_rejections(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]], q: int
) -> None:
    _, draft = make_models(tmp_path)
    sim = sims(spec_env(draft, q))
    for prompt in (PROMPT, OTHER_PROMPT, PROMPT):
        response, lines = ask(sim, prompt)
        assert response.status_code == 200
        ids = one_trace(lines)
        assert ids == reference[prompt]
        assert flags(lines) == ("1", "1")
        assert banners(lines) == [BANNER]
        (summary,) = summaries(lines)
        c = counters(summary)
        assert c["steps"] > 0 and c["offered"] == c["steps"] * (q - 1)
        assert c["matched"] < c["offered"], "no draft was rejected"
        assert c["gen"] == len(ids) - 1 == 95  # tokens after the seed token
        assert c["gen"] <= c["steps"] + c["matched"] < c["gen"] + q  # the last step may be cut
        assert c["q"] == q and c["snap"] == 1
        mean = f"{c['matched'] / c['steps']:.2f}/{c['offered'] / c['steps']:.2f}"
        assert f" mean_accept={mean} " in summary
        # Banner, summary, trace: in that order, inside the request's window.
        assert lines.index(BANNER) < lines.index(summary) < lines.index(traces(lines)[0].group(0))
        body = response.json()
        assert body["usage"]["completion_tokens"] == 96
        assert body["usage"]["accept_rate"] == pytest.approx(c["matched"] / c["offered"])
        assert body["choices"][0]["message"]["content"] == model.detokenize(ids)
    assert stop_sim(sim) == 0


def test_lines_have_the_upstream_gates_shapes(sims: Starter, tmp_path: Path) -> None:
    """The banner is the upstream example's; the trace and summary have its keys, in its order."""
    _, draft = make_models(tmp_path)
    _, lines = ask(sims(spec_env(draft, 4)), PROMPT)
    assert banners(lines) == upstream("BANNER")
    (summary,) = summaries(lines)
    (example,) = upstream("PASS-SUMMARY")
    assert keys(summary) == keys(example) == ["gen", "steps", "matched", "offered", "mean_accept", "q_cap", "full_snap"]
    assert re.search(r" mean_accept=\d+\.\d\d/\d+\.\d\d ", summary) and re.search(r" mean_accept=\d+\.\d\d/\d+\.\d\d ", example)
    (trace_example,) = upstream("PASS-TRACE")
    assert keys(traces(lines)[0].group(0)) == keys(trace_example)


def test_fused_verification_differs_from_target_only(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]]
) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 3), "DFLASH_DS4_FUSED_VERIFY": "1"})
    for prompt in (PROMPT, OTHER_PROMPT):
        _, lines = ask(sim, prompt)
        ids = one_trace(lines)
        assert ids != reference[prompt]
        assert ids[0] == reference[prompt][0]  # prefill is exact; only verification is approximate
    assert requests.get(f"{sim.url}/props", timeout=5).json()["settings"]["fused_verify"] is True


def test_greedy_ignores_the_seed(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    sim = sims(spec_env(draft, 4))
    first, lines1 = ask(sim, PROMPT, seed=1)
    second, lines2 = ask(sim, PROMPT, seed=99)
    assert first.json()["choices"] == second.json()["choices"]
    assert traces(lines1)[0].group(0) == traces(lines2)[0].group(0)
    assert summaries(lines1) == summaries(lines2)


def test_health_props_and_completion_shape(sims: Starter, tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    sim = sims(spec_env(draft, 2))
    health = requests.get(f"{sim.url}/health", timeout=5)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    props = requests.get(f"{sim.url}/props", timeout=5).json()
    assert props["server"]["name"] == "luce-dflash" and props["server"]["version"].endswith("+ds4ci-sim")
    assert props["model"]["target_sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    assert props["model"]["draft_sha256"] == hashlib.sha256(draft.read_bytes()).hexdigest()
    settings = props["settings"]
    assert settings["port"] == sim.port and settings["target_device"] == "hip:0"
    assert (settings["max_ctx"], settings["chunk"], settings["fused_decode"]) == (4096, 512, True)
    assert (settings["spec"], settings["q"], settings["reference_exact"], settings["full_snap"]) == (True, 2, True, True)
    assert settings["adaptive_width"] is False and settings["mmvq_max_ncols"] == "8"
    assert settings["env_prefixes"] == ["DFLASH_DS4_"]
    response, _ = ask(sim, "hi", max_tokens=5)
    body = response.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(render_chat([{"role": "user", "content": "hi"}]).encode()) + 1
    assert (usage["completion_tokens"], usage["total_tokens"]) == (5, usage["prompt_tokens"] + 5)
    assert set(usage["timings"]) == {"prefill_ms", "decode_ms", "decode_tokens_per_sec"}
    assert 0 < usage["accept_rate"] <= 1


def _raw(port: int, request: bytes) -> bytes:
    """Send one request with keep-alive asked for; read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_every_response_closes_its_connection(plain: Sim) -> None:
    body = json.dumps(chat_body("hi", 4)).encode()
    requests_ = [
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
        b"GET /props HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
        b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\n{x}",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body,
    ]
    statuses = []
    for raw in requests_:
        answer = _raw(plain.port, raw)  # returns only because the server closed the connection
        head = answer.split(b"\r\n\r\n", 1)[0].decode()
        statuses.append(int(head.split()[1]))
        assert "\r\nConnection: close" in head, head
    assert statuses == [200, 200, 404, 400, 200]
    for response in (requests.get(f"{plain.url}/health", timeout=5), requests.get(f"{plain.url}/props", timeout=5)):
        assert response.headers["Connection"] == "close"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"messages": []}',
        b'{"messages": [{"role": "user"}]}',
        b'{"messages": [{"role": "system", "content": "no user"}]}',
        b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
        b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": true}',
        b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
        b'{"messages": [{"role": "user", "content": "x"}], "top_k": 1.5}',
        b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
        b'{"messages": [{"role": "user", "content": "x"}], "seed": "1"}',
        b'{"messages": [{"role": "user", "content": "x"}], "rep_pen": "high"}',
    ],
)
def test_malformed_request_is_400_json(plain: Sim, body: bytes) -> None:
    response = requests.post(
        f"{plain.url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}, timeout=5
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]


def test_context_overflow_is_400_with_the_real_message(plain: Sim) -> None:
    # max_tokens left out means 16000, more than this server's --max-ctx 4096.
    response = requests.post(f"{plain.url}/v1/chat/completions", json=chat_body("x", max_tokens=None), timeout=5)
    assert response.status_code == 400
    n_prompt = len(render_chat([{"role": "user", "content": "x"}]).encode()) + 1
    assert response.json()["error"]["message"] == (
        f"This model's maximum context length is 4096 tokens. However, you requested {n_prompt + 16000} tokens "
        f"({n_prompt} in the messages, 16000 in the completion). Please reduce the length of the messages or completion."
    )


def test_max_tokens_is_clamped_to_16000(sims: Starter) -> None:
    port = free_port()  # the default --max-ctx (131072) holds 16000 tokens
    sim = sims(common_env(), args=["--port", str(port), "--target-device", "cuda:0"], port=port)
    response, lines = ask(sim, "x", max_tokens=20000)
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 16000
    assert "[server] max_tokens=20000 clamped to default_max_tokens=16000" in lines
    assert len(one_trace(lines)) == 16000


def test_unknown_path_is_404(plain: Sim) -> None:
    assert requests.get(f"{plain.url}/nope", timeout=5).status_code == 404
    response = requests.post(f"{plain.url}/v1/completions", json={}, timeout=5)
    assert response.status_code == 404 and response.json()["error"]["message"] == "unknown endpoint"


def test_requests_are_served_one_at_a_time_in_arrival_order(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_TOKEN_DELAY": "0.02"})
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = []
        for i, n in enumerate((30, 21, 22)):
            futures.append(pool.submit(ask, sim, "abc", n))
            wait_log(sim, f"chatcmpl-sim{sim.proc.pid}x{i} ")  # queued before the next one is sent
        assert all(f.result()[0].status_code == 200 for f in futures)
    lines = sim.log().splitlines()
    marks = ("[ds4-exact-verify-trace]", "[server] chat DONE")
    kinds = [line.split()[0] if line.startswith("[ds4") else "done" for line in lines if line.startswith(marks)]
    assert kinds == ["[ds4-exact-verify-trace]", "done"] * 3  # never two in flight
    assert [int(m.group("n")) for m in traces(lines)] == [30, 21, 22]  # first come, first served


def test_toy_model_is_keyed_by_file_bytes(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"a different target")
    sim = sims(common_env(), target=other)
    _, lines = ask(sim, PROMPT)
    assert one_trace(lines) != reference[PROMPT]


def test_trace_only_when_asked(sims: Starter) -> None:
    sim = sims({"DFLASH_DS4_ADAPTIVE_WIDTH": "0"})
    _, lines = ask(sim, PROMPT, max_tokens=8)
    assert traces(lines) == []


def test_adaptive_width_changes_counters_not_tokens(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    env = {**spec_env(draft, 4)}
    del env["DFLASH_DS4_ADAPTIVE_WIDTH"]  # default: adaptive on
    sim = sims(env)
    _, lines = ask(sim, PROMPT)
    assert one_trace(lines) == reference[PROMPT]
    c = counters(summaries(lines)[0])
    assert c["offered"] < c["steps"] * 3


def test_stop_sequence_cuts_the_text_not_the_tokens(plain: Sim, reference: dict[str, list[int]]) -> None:
    words = model.detokenize(reference[PROMPT]).split(" ")
    response, lines = ask(plain, PROMPT, stop=[words[3], "never-there"])
    choice = response.json()["choices"][0]
    assert choice["message"]["content"] == " ".join(words[:3]) + " "
    assert choice["finish_reason"] == "stop"
    assert one_trace(lines) == reference[PROMPT]


def test_stream_sends_the_same_answer_as_events(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    sim = sims(spec_env(draft, 3))
    response = requests.post(f"{sim.url}/v1/chat/completions", json=chat_body(PROMPT, stream=True), timeout=30)
    assert response.status_code == 200 and response.headers["Content-Type"] == "text/event-stream"
    events = [line[len("data: "):] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == model.detokenize(reference[PROMPT])
    assert chunks[-1]["usage"]["completion_tokens"] == 96
    assert one_trace(sim.log().splitlines()) == reference[PROMPT] and len(summaries(sim.log().splitlines())) == 1


# --- sampler fields, the model card and speculation -------------------------------------------------


def test_temperature_samples_by_seed_and_decodes_without_speculation(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    sim = sims(spec_env(draft, 3))
    answers = {}
    for seed in (1, 2, 1):
        _, lines = ask(sim, PROMPT, seed=seed, temperature=0.8)
        assert flags(lines) == ("1", "0") and summaries(lines) == [] and banners(lines) == []
        answers.setdefault(seed, []).append(one_trace(lines))
    assert answers[1][0] == answers[1][1] != answers[2][0]
    _, lines = ask(sim, PROMPT, seed=2, temperature=0.8, top_k=1)  # top_k 1 is greedy again
    assert flags(lines) == ("1", "0")


@pytest.mark.parametrize(
    "fields",
    [
        {"presence_penalty": 0.5},
        {"repetition_penalty": 1.1},
        {"repetition_penalty": None, "rep_pen": 1.2},
        {"frequency_penalty": 0.1},
        {"presence_penalty": None},  # the card's 0.5
        {"repetition_penalty": None},  # the card's 1.1
        {"temperature": None},  # the card's 0.6
    ],
)
def test_a_penalty_or_card_default_sends_speculation_to_plain_decoding(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]], fields: dict[str, Any]
) -> None:
    _, draft = make_models(tmp_path)
    sim = sims(spec_env(draft, 3))
    _, lines = ask(sim, PROMPT, **fields)
    assert flags(lines) == ("1", "0")  # reference-exact asked for, speculation did not run
    assert summaries(lines) == [] and banners(lines) == []


def test_neutral_fields_keep_speculation(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    sim = sims(spec_env(draft, 3))
    # repetition_penalty <= 1 needs no logit processing (the real rule is "> 1").
    _, lines = ask(sim, PROMPT, repetition_penalty=None, rep_pen=0.9, top_p=0.5, top_k=7)
    assert flags(lines) == ("1", "1") and len(summaries(lines)) == 1 and one_trace(lines) == reference[PROMPT]


def test_the_bundled_card_is_the_default_and_the_variable_replaces_it(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    bundled = sims(spec_env(draft, 3))
    card = requests.get(f"{bundled.url}/props", timeout=5).json()["model_card"]
    assert card["source"].endswith("ds4ci/simulator/model_cards/ds4ci-sim-toy.json")
    assert (card["presence_penalty"], card["repetition_penalty"], card["temperature"]) == (0.5, 1.1, 0.6)
    # An empty card directory: the hard fallback (greedy, neutral), so omitted fields keep speculation.
    empty = tmp_path / "no-cards"
    empty.mkdir()
    fallback = sims({**spec_env(draft, 3), "DFLASH_MODEL_CARDS_DIR": str(empty)})
    assert "[model_card] using hard fallback (no sidecar, no family match for arch='deepseek4')" in fallback.log()
    omitted = {k: None for k in ("temperature", "top_p", "top_k", "presence_penalty", "repetition_penalty", "seed")}
    _, lines = ask(fallback, PROMPT, **omitted)
    assert flags(lines) == ("1", "1") and len(summaries(lines)) == 1
    # A card of one's own: only its repetition penalty.
    mine = tmp_path / "cards"
    mine.mkdir()
    (mine / "ds4ci-sim-toy.json").write_text('{"name": "x", "sampling": {"repetition_penalty": 1.3, "top_k": "bad"}}')
    custom = sims({**spec_env(draft, 3), "DFLASH_MODEL_CARDS_DIR": str(mine)})
    got = requests.get(f"{custom.url}/props", timeout=5).json()["model_card"]
    assert (got["repetition_penalty"], got["top_k"], got["presence_penalty"]) == (1.3, None, None)
    _, lines = ask(custom, PROMPT, repetition_penalty=None)
    assert flags(lines) == ("1", "0")
    _, lines = ask(custom, PROMPT, presence_penalty=None)
    assert flags(lines) == ("1", "1")


def test_a_broken_card_falls_back_like_the_real_server(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    cards = tmp_path / "broken"
    cards.mkdir()
    (cards / "ds4ci-sim-toy.json").write_text("{not json")
    sim = sims({**spec_env(draft, 3), "DFLASH_MODEL_CARDS_DIR": str(cards)})
    assert "[model_card] sidecar parse failed (" in sim.log() and "falling through" in sim.log()
    assert requests.get(f"{sim.url}/props", timeout=5).json()["model_card"]["source"] == "hard-fallback"


# --- the toy model in-process (fast, many prompts) -----------------------------------------------


def _models(seed: bytes) -> tuple[model.ToyModel, model.ToyModel]:
    return (
        model.ToyModel(hashlib.sha256(b"target" + seed).digest()),
        model.ToyModel(hashlib.sha256(b"draft" + seed).digest()),
    )


@pytest.mark.parametrize("q", [2, 3, 4])
def test_model_exact_speculation_is_target_greedy_with_realistic_acceptance(q: int) -> None:
    target, draft = _models(b"x")
    matched = offered = 0
    for i in range(60):
        prompt = model.tokenize(f"prompt number {i}")
        greedy = model.decode_target(target, prompt, 96)
        spec = model.decode_spec(target, draft, prompt, 96, q, exact=True)
        assert spec.ids == greedy.ids and spec.speculation
        assert spec.gen == 95 <= spec.steps + spec.matched < 95 + q
        assert spec.offered == spec.steps * (q - 1)
        matched, offered = matched + spec.matched, offered + spec.offered
        approx = model.decode_spec(target, draft, prompt, 96, q, exact=False)
        assert approx.ids != greedy.ids
    # Real runs: q=2 46/49, q=3 60/70, q=4 67/84 -> acceptance 0.94, 0.86, 0.80.
    assert 0.7 < matched / offered < 0.97


def test_model_width_one_drafts_nothing() -> None:
    target, draft = _models(b"y")
    prompt = model.tokenize("width one")
    spec = model.decode_spec(target, draft, prompt, 20, 1, exact=True)
    assert spec.ids == model.decode_target(target, prompt, 20).ids
    assert (spec.steps, spec.matched, spec.offered, spec.gen) == (19, 0, 0, 19)


def test_model_penalty_replaces_repeats_only() -> None:
    target, _ = _models(b"z")
    prompt = model.tokenize("penalties")
    greedy = model.decode_target(target, prompt, 400).ids
    penalised = model.decode_sampled(target, prompt, 400, model.Sampler(repetition_penalty=1.2)).ids
    assert penalised[0] == greedy[0]
    for i in range(1, 400):  # each position differs from greedy only where greedy would repeat
        if penalised[:i] == greedy[:i]:
            assert (penalised[i] != greedy[i]) == (greedy[i] in greedy[max(0, i - 256) : i])


def test_model_demo_inputs_pass_and_leak_is_caught(tmp_path: Path) -> None:
    """The files and prompt ``ds4ci demo`` uses: exact must show rejections, fused must differ."""
    from ds4ci.commands.demo import make_demo_inputs

    inputs = make_demo_inputs(tmp_path)
    target = model.ToyModel(hashlib.sha256(inputs["target"].read_bytes()).digest())
    draft = model.ToyModel(hashlib.sha256(inputs["draft"].read_bytes()).digest())
    text = inputs["prompt_files"][0].read_text(encoding="utf-8")
    prompt = model.tokenize(render_chat([{"role": "user", "content": text}]))
    greedy = model.decode_target(target, prompt, 96)
    for q in (2, 3, 4):
        spec = model.decode_spec(target, draft, prompt, 96, q, exact=True)
        assert spec.ids == greedy.ids and spec.matched < spec.offered
        assert model.decode_spec(target, draft, prompt, 96, q, exact=False).ids != greedy.ids


def test_engine_holds_late_lines_back_for_after_the_response(tmp_path: Path) -> None:
    """summary-after-response: the engine writes no protocol line itself; the worker writes them
    once the response is sent (the process-level test below checks the order in the log)."""
    target, draft = make_models(tmp_path)
    env = {**spec_env(draft, 3), "DS4SIM_FAULTS": "summary-after-response", "DS4SIM_OVERRIDE_DIR": str(tmp_path)}
    err, out = io.StringIO(), io.StringIO()
    log = Log(err, out)
    settings = load_settings(parse_args([str(target)]), env, read_knobs(env), log)
    request = parse_request(json.dumps(chat_body(PROMPT)).encode(), 131072, ModelCard(source="none"))
    before = err.getvalue()
    answer = Engine(settings, log).complete(request, "chatcmpl-x")
    written = err.getvalue()[len(before):]
    late = [p.text for p in answer.after]
    assert [t.split()[0] for t in late] == ["[ds4-spec]", "[ds4-spec]", "[ds4-exact-verify-trace]"]
    assert late[0] == BANNER and not any(t in written for t in late) and "DSpark decode" in written


# --- the environment, read like the real server reads it -----------------------------------------


def test_missing_or_unloadable_draft_serves_without_speculation(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]]
) -> None:
    _, draft = make_models(tmp_path)
    cases = [
        ({"DFLASH_DS4_DRAFT": ""}, "[deepseek4] DFLASH_DS4_SPEC set but DFLASH_DS4_DRAFT gguf missing"),
        (
            {"DFLASH_DS4_DRAFT": "/nonexistent/draft.gguf"},
            "[deepseek4] DSpark drafter load FAILED: cannot open /nonexistent/draft.gguf",
        ),
        ({"DS4SIM_FAULTS": "draft-load-fails"}, "[deepseek4] DSpark drafter load FAILED: "),
    ]
    for env, line in cases:
        sim = sims({**spec_env(draft, 3), **env})
        assert any(entry.startswith(line) for entry in sim.log().splitlines()), sim.log()
        assert "spec-decode ENABLED" not in sim.log()
        _, lines = ask(sim, PROMPT)
        assert flags(lines) == ("1", "0") and one_trace(lines) == reference[PROMPT]
        assert summaries(lines) == [] and banners(lines) == []
        props = requests.get(f"{sim.url}/props", timeout=5).json()["settings"]
        assert (props["spec_requested"], props["spec"]) == (True, False)


@pytest.mark.parametrize(
    ("env", "q_cap", "snap", "banner"),
    [
        ({"DFLASH_DS4_SPEC_Q": "1"}, 16, 1, True),  # out of range: ignored, the full-snapshot default
        ({"DFLASH_DS4_SPEC_Q": "3x"}, 3, 1, True),  # read like atoi
        ({"DFLASH_DS4_SPEC_REFERENCE_EXACT": "yes"}, 3, 1, True),  # any value not starting with 0 is on
        ({"DFLASH_DS4_SPEC_REFERENCE_EXACT": "0", "DFLASH_DS4_SPEC_Q": "8"}, 4, 0, False),  # fast path: q <= 4
        ({"DFLASH_DS4_SPEC_REFERENCE_EXACT": "", "DFLASH_DS4_FULL_SNAP": "1", "DFLASH_DS4_SPEC_Q": "8"}, 8, 1, False),
        ({"LUCE_MMVQ_MAX_NCOLS": "2"}, 3, 1, True),  # below q: recorded only, never a refusal
    ],
)
def test_policy_values_are_read_like_the_real_server(
    sims: Starter, tmp_path: Path, env: dict[str, str], q_cap: int, snap: int, banner: bool
) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 3), **env})
    _, lines = ask(sim, PROMPT)
    c = counters(summaries(lines)[0])
    assert (c["q"], c["snap"], bool(banners(lines))) == (q_cap, snap, banner)


def test_override_files_are_read_on_every_request(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    sim = sims({**spec_env(draft, 4), "DS4SIM_OVERRIDE_DIR": str(overrides)})
    assert counters(summaries(ask(sim, PROMPT)[1])[0])["q"] == 4
    (overrides / "ds4_spec_q").write_text("2\n")
    _, lines = ask(sim, PROMPT)
    c = counters(summaries(lines)[0])
    assert c["q"] == 2 and c["offered"] == c["steps"] and one_trace(lines) == reference[PROMPT]
    (overrides / "ds4_spec_q").write_text("1\n")  # q=1: no drafting at all
    (summary,) = summaries(ask(sim, PROMPT)[1])
    assert re.match(r"^\[ds4-spec\] gen=95 steps=95 matched=0 offered=0 mean_accept=0\.00/0\.00 q_cap=1 full_snap=1$", summary)
    (overrides / "ds4_spec_q").unlink()
    (overrides / "ds4_awidth").write_text("1\n")  # adaptive on, against the variable's 0
    c = counters(summaries(ask(sim, PROMPT)[1])[0])
    assert c["q"] == 4 and c["offered"] < c["steps"] * 3


def test_seq_verify_caps_the_width_and_timing_adds_step_lines(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 6), "DFLASH_DS4_SEQ_VERIFY": "1", "DFLASH_DS4_TIMING": "1"})
    _, lines = ask(sim, PROMPT)
    assert "[ds4-spec] sequential verify supports q<=4; capping requested q=6 to 4" in lines
    assert counters(summaries(lines)[0])["q"] == 4
    assert len([line for line in lines if line.startswith("[ds4-spec-t] step=")]) == 4


# --- fault switches ------------------------------------------------------------------------------


def test_fault_parsing_and_scopes() -> None:
    faults = parse_faults(" mismatch-last@q3 , hang-request,,target-shows-spec@spec")
    assert faults.active("mismatch-last", Arm(spec=True, q=3))
    assert not faults.active("mismatch-last", Arm(spec=True, q=2))
    assert not faults.active("mismatch-last", Arm(spec=False, q=3))
    assert faults.active("hang-request", Arm(spec=False, q=2))
    assert faults.active("target-shows-spec", Arm(spec=True, q=2))
    assert not faults.active("target-shows-spec", Arm(spec=False, q=2))
    assert parse_faults("").faults == ()


SPEC_LOG_FAULTS = {name for name, (scope, _) in FAULTS.items() if scope == "spec"}
TARGET_FAULTS = {name for name, (scope, _) in FAULTS.items() if scope == "target"}


def _spec_window(sims: Starter, tmp_path: Path, faults: str, q: int = 3, prompt: str = PROMPT) -> tuple[Sim, list[str]]:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, q), "DS4SIM_FAULTS": faults})
    response, lines = ask(sim, prompt)
    assert response.status_code == 200
    return sim, lines


def _check_no_trace(lines: list[str], ref: list[int]) -> None:
    assert traces(lines) == []


def _check_duplicate_trace(lines: list[str], ref: list[int]) -> None:
    found = traces(lines)
    assert len(found) == 2 and found[0].group(0) == found[1].group(0)


def _check_trace_count_off(lines: list[str], ref: list[int]) -> None:
    (trace,) = traces(lines)
    assert int(trace.group("n")) == len(trace_ids(trace)) + 1 and trace_ids(trace) == ref


def _check_empty_trace(lines: list[str], ref: list[int]) -> None:
    (trace,) = traces(lines)
    assert trace.group("n") == "0" and trace.group("ids") == ""


def _check_malformed_trace(lines: list[str], ref: list[int]) -> None:
    (trace,) = traces(lines)
    with pytest.raises(ValueError):
        trace_ids(trace)


def _check_wrong_flags(lines: list[str], ref: list[int]) -> None:
    (trace,) = traces(lines)
    assert (trace.group("ref"), trace.group("spec")) == ("0", "0") and trace_ids(trace) == ref


def _check_no_banner(lines: list[str], ref: list[int]) -> None:
    assert banners(lines) == [] and len(summaries(lines)) == 1 and one_trace(lines) == ref


def _check_no_summary(lines: list[str], ref: list[int]) -> None:
    assert summaries(lines) == [] and one_trace(lines) == ref


def _check_duplicate_summary(lines: list[str], ref: list[int]) -> None:
    found = summaries(lines)
    assert len(found) == 2 and found[0] == found[1]


def _check_all_accepted(lines: list[str], ref: list[int]) -> None:
    c = counters(summaries(lines)[0])
    assert c["matched"] == c["offered"] > 0 and one_trace(lines) == ref


def _check_zero_steps(lines: list[str], ref: list[int]) -> None:
    c = counters(summaries(lines)[0])
    assert c["steps"] == 0 and c["offered"] > 0


def _check_ar_fallback(lines: list[str], ref: list[int]) -> None:
    assert sum(1 for line in lines if line.startswith("[deepseek4] DSpark spec loaded but this request decodes AR: ")) == 1
    assert one_trace(lines) == ref and banners(lines) == [BANNER]


def _check_no_counters(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert re.match(r"^\[ds4-spec\] gen=95 steps=\d+ mean_accept=\d\.\d\d/2\.00 q_cap=3 full_snap=1$", summary), summary
    assert one_trace(lines) == ref and banners(lines) == [BANNER]


def _check_old_summary(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert re.match(r"^\[ds4-spec\] gen=95 steps=\d+ mean_accept=\d\.\d\d/2 q_cap=3 full_snap=1$", summary), summary


def _check_old_mean(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert re.match(
        r"^\[ds4-spec\] gen=95 steps=\d+ matched=\d+ offered=\d+ mean_accept=\d\.\d\d/2 q_cap=3 full_snap=1$", summary
    ), summary


def _check_float_counters(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert re.search(r" matched=\d+\.0 offered=\d+\.0 ", summary) and SUMMARY.match(summary) is None


def _check_verify_field(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert re.search(r" q_cap=3 verify=sequential full_snap=1$", summary), summary
    assert "matched=" in summary and one_trace(lines) == ref


def _check_ms_step_tail(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert summary.endswith(" full_snap=1 sampling=0 sample=0.12 ms/step")
    assert counters(summary)["matched"] < counters(summary)["offered"]


def _check_extra_summary_fields(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    c = counters(summary)  # still the documented format, plus trailing fields
    assert summary.endswith(" full_snap=1 sampling=greedy draft=toy")
    assert c["matched"] < c["offered"] and one_trace(lines) == ref and len(banners(lines)) == 1


def _check_no_full_snap(lines: list[str], ref: list[int]) -> None:
    assert counters(summaries(lines)[0])["snap"] == 0


def _check_capture_token0(lines: list[str], ref: list[int]) -> None:
    ids = one_trace(lines)
    assert ids[0] != ref[0]


def _check_mismatch_last(lines: list[str], ref: list[int]) -> None:
    ids = one_trace(lines)
    assert ids[:-1] == ref[:-1] and ids[-1] != ref[-1]


def _check_leak_fused_verify(lines: list[str], ref: list[int]) -> None:
    (trace,) = traces(lines)
    assert trace.group("ref") == "1"  # it still claims reference-exact: only the tokens tell
    assert trace_ids(trace) != ref and len(banners(lines)) == 1


def _check_draft_load_fails(lines: list[str], ref: list[int]) -> None:
    assert flags(lines) == ("1", "0") and summaries(lines) == [] and banners(lines) == [] and one_trace(lines) == ref


def _failure_check(line: str) -> Callable[[list[str], list[int]], None]:
    def check(lines: list[str], ref: list[int]) -> None:
        assert [entry for entry in lines if entry in FAILURE_LINES.values()] == [line]
        # Everything else is intact: only the failure line shows the problem.
        assert one_trace(lines) == ref and banners(lines) == [BANNER] and len(summaries(lines)) == 1

    return check


SINGLE_REQUEST_CHECKS: dict[str, Callable[[list[str], list[int]], None]] = {
    "no-trace": _check_no_trace,
    "duplicate-trace": _check_duplicate_trace,
    "trace-count-off": _check_trace_count_off,
    "empty-trace": _check_empty_trace,
    "malformed-trace": _check_malformed_trace,
    "wrong-flags": _check_wrong_flags,
    "no-banner": _check_no_banner,
    "no-summary": _check_no_summary,
    "duplicate-summary": _check_duplicate_summary,
    "all-accepted": _check_all_accepted,
    "zero-steps": _check_zero_steps,
    "no-counters": _check_no_counters,
    "old-summary": _check_old_summary,
    "old-mean": _check_old_mean,
    "float-counters": _check_float_counters,
    "verify-field": _check_verify_field,
    "ms-step-tail": _check_ms_step_tail,
    "extra-summary-fields": _check_extra_summary_fields,
    "no-full-snap": _check_no_full_snap,
    "capture-token0": _check_capture_token0,
    "mismatch-last": _check_mismatch_last,
    "leak-fused-verify": _check_leak_fused_verify,
    "draft-load-fails": _check_draft_load_fails,
    "ar-fallback": _check_ar_fallback,
    **{name: _failure_check(line) for name, line in FAILURE_LINES.items()},
}


@pytest.mark.parametrize("fault", sorted(SINGLE_REQUEST_CHECKS))
def test_spec_arm_fault_is_observable(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]], fault: str
) -> None:
    _, lines = _spec_window(sims, tmp_path, fault)
    SINGLE_REQUEST_CHECKS[fault](lines, reference[PROMPT])


def test_failure_lines_are_the_real_ones() -> None:
    assert sorted(FAILURE_LINES.values()) == sorted(
        f"[ds4-spec] {text}"
        for text in (
            "snapshot failed", "snapshot restore failed", "replay verify failed", "verify failed",
            "drafter forward failed", "restore after verify failure failed", "no CPU snapshot backend",
        )
    )


BUILD_FAULTS = {"luce-prefix", "luce-only", "trace-stdout", "summary-after-response", "fork-dialect", "token-trace-lines"}


@pytest.mark.parametrize("q", [2, 4])
def test_the_fork_dialect_prints_what_41ee7d0_printed_from_its_own_steps(sims: Starter, tmp_path: Path, q: int) -> None:
    """Banner, counterless summary, no trace; the compare, timing and per-token lines tell the steps it ran, which
    ds4ci's parsers read back to exactly the counters and the answer's tokens."""
    from ds4ci.judging import counters
    from ds4ci.judging.protocol import classify, parse_summary
    from ds4ci.judging.tinywords import ids_from_text

    _, draft = make_models(tmp_path)
    env = {**spec_env(draft, q), "DFLASH_DS4_TIMING": "1", "DFLASH_DS4_TOKEN_TRACE": "1",
           "DS4SIM_FAULTS": "fork-dialect,token-trace-lines"}
    response, lines = ask(sims(env), PROMPT)
    assert traces(lines) == [] and banners(lines) == [BANNER]
    (summary,) = summaries(lines)
    assert re.fullmatch(rf"\[ds4-spec\] gen=95 steps=\d+ mean_accept=\d\.\d\d/{q - 1}\.00 q_cap={q} full_snap=1", summary)
    ids = ids_from_text(response.json()["choices"][0]["message"]["content"])
    assert ids is not None and len(ids) == 96
    records = [classify(line) for line in lines if line.startswith(("[ds4-spec-cmp]", "[ds4-spec-t] step=", "[ds4-spec-token]"))]
    assert all(r is not None and r.kind in ("step", "token") for r in records), records
    steps = [r.step for r in records if r is not None and r.step is not None]
    tokens = [r.token for r in records if r is not None and r.token is not None]
    compare = [line for line in lines if line.startswith("[ds4-spec-cmp]")]
    assert len(compare) == 8 and [t.token for t in tokens] == ids[1:]
    texts = [line for line in lines if line.startswith(("[ds4-spec-cmp]", "[ds4-spec-t] step="))]
    found = counters.derive(parse_summary(summary[len("[ds4-spec] "):]), q, steps, texts, tokens)
    assert found.contradictions == () and found.source == counters.DERIVED
    assert found.matched == sum(t.slot - 1 for t in tokens if t.bonus) + (0 if tokens[-1].bonus else tokens[-1].slot)
LIFECYCLE_FAULTS = {
    "exit-before-ready", "loading-503", "exit-mid-request", "hang-request", "ignore-sigterm", "slow-teardown",
    "fork-helper", "setsid-helper", "http-error", "http-400",
}


ANSWER_FAULTS = {"answer-text-differs", "answer-tokens-off"}
EXACT_TRACE_FAULTS = {"exact-trace-writer", "exact-trace-no-tokens", "exact-trace-ids-off", "exact-trace-symlink",
                      "exact-trace-fifo"}


def test_the_exact_trace_writer_records_the_generated_ids(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]]
) -> None:
    """Like the DFLASH-era writer: on only with the path and a width 1..4; tokens are the generated IDs."""
    from ds4ci.judging import exacttrace

    _, draft = make_models(tmp_path)
    path = tmp_path / "trace.jsonl"
    env = {**spec_env(draft, 3), "DFLASH_DS4_EXACT_TRACE_PATH": str(path)}
    sim = sims({**env, "DS4SIM_FAULTS": "exact-trace-writer"})
    ask(sim, PROMPT)
    assert "[deepseek4-exact-trace] DFLASH_DS4_EXACT_TRACE_Q must be 1..4\n" in sim.log() and not path.exists()
    sim = sims({**env, "DFLASH_DS4_EXACT_TRACE_Q": "2", "DS4SIM_FAULTS": "exact-trace-writer"})
    for _ in range(2):
        _, lines = ask(sim, PROMPT)
    assert f"[deepseek4-exact-trace] enabled path={path} q=2\n" in sim.log()
    trace = exacttrace.parse(path.read_bytes(), "trace.jsonl")
    assert trace.problem is None
    assert [r.token_ids for r in trace.requests] == [tuple(reference[PROMPT])] * 2 == [tuple(one_trace(lines))] * 2


@pytest.mark.parametrize(("fault", "problem"), [
    ("exact-trace-no-tokens", "trace.jsonl line 8: request_end of request 1 without its tokens record"),
    ("exact-trace-ids-off", None),
])
def test_exact_trace_faults_break_the_file(sims: Starter, tmp_path: Path, fault: str, problem: str | None) -> None:
    from ds4ci.judging import exacttrace

    _, draft = make_models(tmp_path)
    path = tmp_path / "trace.jsonl"
    env = {**spec_env(draft, 3), "DFLASH_DS4_EXACT_TRACE_PATH": str(path), "DFLASH_DS4_EXACT_TRACE_Q": "1"}
    sim = sims({**env, "DS4SIM_FAULTS": f"exact-trace-writer,{fault}"})
    for _ in range(2):
        response, _ = ask(sim, PROMPT)
    trace = exacttrace.parse(path.read_bytes(), "trace.jsonl")
    assert trace.problem == problem
    if problem is None:
        answered = response.json()["usage"]["completion_tokens"]
        assert [len(r.token_ids) for r in trace.requests] == [answered - 1] * 2


@pytest.mark.parametrize(("fault", "kind"), [("exact-trace-symlink", "link"), ("exact-trace-fifo", "fifo")])
def test_exact_trace_path_faults_leave_no_file(sims: Starter, tmp_path: Path, fault: str, kind: str) -> None:
    import stat

    _, draft = make_models(tmp_path)
    path = tmp_path / "trace.jsonl"
    env = {**spec_env(draft, 3), "DFLASH_DS4_EXACT_TRACE_PATH": str(path), "DFLASH_DS4_EXACT_TRACE_Q": "1"}
    sim = sims({**env, "DS4SIM_FAULTS": f"exact-trace-writer,{fault}"})
    ask(sim, PROMPT)
    mode = path.lstat().st_mode
    assert stat.S_ISLNK(mode) if kind == "link" else stat.S_ISFIFO(mode)


@pytest.mark.parametrize("fault", sorted(ANSWER_FAULTS))
def test_answer_faults_change_the_answer_and_nothing_the_log_says(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]], fault: str
) -> None:
    _, draft = make_models(tmp_path)
    clean, _ = ask(sims(spec_env(draft, 3)), PROMPT)
    sim = sims({**spec_env(draft, 3), "DS4SIM_FAULTS": fault})
    response, lines = ask(sim, PROMPT)
    assert one_trace(lines) == reference[PROMPT]
    got, want = response.json(), clean.json()
    text = [a["choices"][0]["message"]["content"] for a in (got, want)]
    tokens = [a["usage"]["completion_tokens"] for a in (got, want)]
    assert tokens[1] == len(reference[PROMPT])
    if fault == "answer-text-differs":
        assert text[0] != text[1] and tokens[0] == tokens[1]
    else:
        assert text[0] == text[1] and tokens[0] == tokens[1] + 1


def test_every_fault_has_a_test() -> None:
    repeat = {"second-request-differs", "repeat-counters-differ"}
    assert set(FAULTS) == (
        set(SINGLE_REQUEST_CHECKS) | TARGET_FAULTS | repeat | LIFECYCLE_FAULTS | BUILD_FAULTS | ANSWER_FAULTS
        | EXACT_TRACE_FAULTS
    )


def test_spec_faults_leave_the_target_arm_alone(sims: Starter, reference: dict[str, list[int]]) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": ",".join(sorted(SPEC_LOG_FAULTS))})
    for _ in range(2):
        _, lines = ask(sim, PROMPT)
        assert one_trace(lines) == reference[PROMPT]
        assert flags(lines) == ("0", "0")
        assert summaries(lines) == [] and banners(lines) == []
        assert not set(FAILURE_LINES.values()) & set(lines)


def test_target_faults_leave_the_spec_arm_alone(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 2), "DS4SIM_FAULTS": ",".join(sorted(TARGET_FAULTS))})
    for _ in range(2):
        _, lines = ask(sim, PROMPT)
        assert one_trace(lines) == reference[PROMPT]
        assert len(summaries(lines)) == 1


def test_scoped_fault_acts_in_one_width_only(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    for q, broken in ((2, False), (3, True)):
        sim = sims({**spec_env(draft, q), "DS4SIM_FAULTS": "mismatch-last@q3,fail-verify@q3"})
        _, lines = ask(sim, PROMPT)
        assert (one_trace(lines) != reference[PROMPT]) is broken
        assert ("[ds4-spec] verify failed" in lines) is broken


def test_target_shows_spec(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "target-shows-spec"})
    _, lines = ask(sim, PROMPT)
    (trace,) = traces(lines)
    assert trace.group("spec") == "1" and len(summaries(lines)) == 1


def test_nondeterministic_target(sims: Starter, reference: dict[str, list[int]]) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "nondeterministic-target"})
    answers = [one_trace(ask(sim, PROMPT)[1]) for _ in range(3)]
    assert answers[0] == reference[PROMPT]
    assert answers[0] != answers[1] != answers[2] != answers[0]


def test_second_request_differs(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 3), "DS4SIM_FAULTS": "second-request-differs"})
    first = one_trace(ask(sim, PROMPT)[1])
    other = one_trace(ask(sim, OTHER_PROMPT)[1])
    second = one_trace(ask(sim, PROMPT)[1])
    assert first == reference[PROMPT] and other == reference[OTHER_PROMPT]
    assert second != first


def test_repeat_counters_differ(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 3), "DS4SIM_FAULTS": "repeat-counters-differ"})
    _, lines1 = ask(sim, PROMPT)
    _, lines2 = ask(sim, PROMPT)
    assert one_trace(lines1) == one_trace(lines2)
    c1, c2 = counters(summaries(lines1)[0]), counters(summaries(lines2)[0])
    assert c1 != c2 and c1["gen"] == c2["gen"]


def _luce(env: Mapping[str, str]) -> dict[str, str]:
    return {k.replace("DFLASH_DS4_", "LUCE_DS4_"): v for k, v in env.items()}


def test_default_build_reads_only_the_dflash_names(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    sim = sims(_luce(spec_env(draft, 3)))  # the newer names mean nothing to this build
    _, lines = ask(sim, PROMPT)
    assert summaries(lines) == [] and traces(lines) == []


def test_luce_prefix_reads_the_newer_family_first(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    newer = sims({**_luce(spec_env(draft, 3)), "DS4SIM_FAULTS": "luce-prefix"})
    _, lines = ask(newer, PROMPT)
    assert one_trace(lines) == reference[PROMPT] and len(summaries(lines)) == 1
    # ... and the newer names win over the old ones (so an inherited LUCE_DS4_* leaks unless stripped).
    leaked = sims({**spec_env(draft, 3), "LUCE_DS4_FUSED_VERIFY": "1", "DS4SIM_FAULTS": "luce-prefix"})
    _, lines = ask(leaked, PROMPT)
    assert one_trace(lines) != reference[PROMPT]
    props = requests.get(f"{leaked.url}/props", timeout=5).json()["settings"]
    assert props["env_prefixes"] == ["LUCE_DS4_", "DFLASH_DS4_"]


def test_luce_only_ignores_the_dflash_names(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    newer = sims({**_luce(spec_env(draft, 3)), "DS4SIM_FAULTS": "luce-only"})
    _, lines = ask(newer, PROMPT)
    assert flags(lines) == ("1", "1") and one_trace(lines) == reference[PROMPT] and len(summaries(lines)) == 1
    old_names = sims({**spec_env(draft, 3), "DS4SIM_FAULTS": "luce-only"})
    _, lines = ask(old_names, PROMPT)
    assert traces(lines) == [] and summaries(lines) == []  # not even the trace variable is seen
    missing = sims({**spec_env(draft, 3), "LUCE_DS4_SPEC": "1", "DS4SIM_FAULTS": "luce-only"})
    assert "[deepseek4] LUCE_DS4_SPEC set but LUCE_DS4_DRAFT gguf missing" in missing.log()
    assert requests.get(f"{missing.url}/props", timeout=5).json()["settings"]["env_prefixes"] == ["LUCE_DS4_"]


def test_trace_stdout_moves_only_the_trace(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    for env, spec in ((spec_env(draft, 3), "1"), (common_env(), "0")):
        sim = sims({**env, "DS4SIM_FAULTS": "trace-stdout"})
        _, lines = ask(sim, PROMPT)
        assert traces(lines) == [] and len(summaries(lines)) == int(spec)
        (trace,) = traces(sim.out().splitlines())
        assert trace.group("spec") == spec and trace_ids(trace) == reference[PROMPT]


def test_summary_after_response_writes_protocol_lines_after_the_answer(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    for faults, late in (("", False), ("summary-after-response", True)):
        sim = sims({**spec_env(draft, 3), "DS4SIM_FAULTS": faults})
        ask(sim, PROMPT)
        stop_sim(sim)
        lines = sim.log().splitlines()
        decode = next(i for i, line in enumerate(lines) if line.startswith("[deepseek4] DSpark decode:"))
        done = next(i for i, line in enumerate(lines) if line.startswith("[server] chat DONE"))
        protocol = [lines.index(BANNER), lines.index(summaries(lines)[0]), lines.index(traces(lines)[0].group(0))]
        assert protocol == sorted(protocol)
        if late:
            assert decode < protocol[0] and protocol[-1] < done  # written between the response and DONE
        else:
            assert protocol[1] < decode and protocol[-1] < done


def test_http_error(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "http-error"})
    response, lines = ask(sim, PROMPT)
    assert response.status_code == 500 and "error" in response.json()
    assert traces(lines) == []


def test_exit_before_ready_never_listens(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "exit-before-ready"}, wait=False)
    assert sim.proc.wait(timeout=20) == 1
    assert "exit-before-ready" in sim.log() and "listening" not in sim.log()


def test_exit_mid_request(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "exit-mid-request"})
    with pytest.raises(requests.ConnectionError):
        ask(sim, PROMPT)
    assert sim.proc.wait(timeout=20) == 1


def test_hang_request_never_answers_and_term_waits_for_it(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "hang-request"})
    with pytest.raises(requests.ReadTimeout):
        ask(sim, PROMPT, timeout=1.0)
    assert requests.get(f"{sim.url}/health", timeout=5).status_code == 200  # alive, just stuck
    sim.proc.send_signal(signal.SIGTERM)
    wait_log(sim, "stopping")
    with pytest.raises(subprocess.TimeoutExpired):
        sim.proc.wait(timeout=1.0)  # the in-flight generation never finishes, so neither does it
    kill_group(sim)
    assert sim.proc.returncode == -signal.SIGKILL


def test_ignore_sigterm(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "ignore-sigterm"})
    sim.proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        sim.proc.wait(timeout=1.0)
    assert requests.get(f"{sim.url}/health", timeout=5).status_code == 200
    os.killpg(sim.proc.pid, signal.SIGKILL)
    assert sim.proc.wait(timeout=20) == -signal.SIGKILL


def test_fork_helper_outlives_the_server_in_its_group(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "fork-helper"})
    match = re.search(r"forked helper pid (\d+)", sim.log())
    assert match
    helper = int(match.group(1))
    assert os.getpgid(helper) == os.getpgid(sim.proc.pid) == sim.proc.pid  # same group, no setsid
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=20) == 0
    try:
        os.kill(helper, 0)  # still alive after the server exited ...
        with socket.create_connection(("127.0.0.1", sim.port), timeout=5):
            pass  # ... and still holding the listening socket (the kernel accepts into its backlog)
    finally:
        os.killpg(sim.proc.pid, signal.SIGKILL)  # the whole group: the only thing that ends it


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_setsid_helper_survives_the_servers_group(sims: Starter, tmp_path: Path) -> None:
    pid_file = tmp_path / "helper.pid"
    sim = sims({**common_env(), "DS4SIM_FAULTS": "setsid-helper", "DS4SIM_HELPER_PID_FILE": str(pid_file)})
    helper = int(pid_file.read_text())
    assert f"setsid helper pid {helper} " in sim.log()
    try:
        assert os.getsid(helper) == os.getpgid(helper)  # a session and group of its own ...
        assert os.getsid(helper) != os.getsid(sim.proc.pid) and os.getpgid(helper) != sim.proc.pid  # ... not the server's
        kill_group(sim)  # KILL of the server's whole process group
        assert sim.proc.returncode == -signal.SIGKILL
        assert _alive(helper), "the setsid helper died with the server's group"
        environ = Path(f"/proc/{helper}/environ").read_bytes().split(b"\0")
        assert b"DS4SIM_FAULTS=setsid-helper" in environ  # findable by an inherited variable
    finally:
        if _alive(helper):
            os.kill(helper, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(helper)


def test_unknown_or_contradicting_faults_are_refused(sims: Starter) -> None:
    for faults, needle in (
        ("mismatch-last,no-such-fault", "no-such-fault"),
        ("luce-prefix@spec", "acts in every arm"),
        ("luce-only@q2", "acts in every arm"),
        ("luce-only,luce-prefix", "contradict"),
    ):
        sim = sims({**common_env(), "DS4SIM_FAULTS": faults}, wait=False)
        assert sim.proc.wait(timeout=20) == 2
        assert needle in sim.log()


# --- start-up and shutdown -----------------------------------------------------------------------


def _run_sim(tmp_path: Path, extra_args: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    target, _ = make_models(tmp_path)
    return subprocess.run(
        [*sim_command(), str(target), *extra_args],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    "flags_",
    [["--port", "1", "--no-such-flag"], ["--port", "1", "--max"], ["--port", "1", "--target-device", "gpu0"], []],
)
def test_bad_command_line_exits_2_on_stderr(tmp_path: Path, flags_: list[str]) -> None:
    if not flags_:  # no TARGET at all
        done = subprocess.run(sim_command(), capture_output=True, text=True, timeout=30, check=False)
    else:
        done = _run_sim(tmp_path, flags_)
    assert done.returncode == 2 and done.stdout == "" and "usage:" in done.stderr


@pytest.mark.parametrize("device", [None, "cuda:0", "cpu:0", "cuda:1"])
def test_fused_decode_off_hip_exits_2_before_listening(tmp_path: Path, device: str | None) -> None:
    port = free_port()
    args = ["--port", str(port), "--ds4-fused-decode", *(["--target-device", device] if device else [])]
    done = _run_sim(tmp_path, args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "[server] --ds4-fused-decode and --ds4-expert-top-k currently require single-device HIP DeepSeek4\n"
    )


def test_defaults_are_the_real_servers() -> None:
    args = parse_args(["t.gguf"])
    assert (args.port, args.max_ctx, args.chunk, args.prefill, args.fused_decode) == (8080, 131072, 512, "exact", False)
    assert args.host == "127.0.0.1"  # the real default is 0.0.0.0; the simulator stays on loopback


@pytest.mark.parametrize("host", ["localhost", "::1", "127.0.0.256"])
def test_only_an_ipv4_address_is_bound(sims: Starter, host: str) -> None:
    sim = sims(common_env(), args=["--host", host, "--port", str(free_port())], wait=False)
    assert sim.proc.wait(timeout=20) == 1
    assert f"[server] invalid host address: {host}" in sim.log()


def test_port_taken_exits_1(sims: Starter) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sim = sims(common_env(), port=port, wait=False)
        assert sim.proc.wait(timeout=20) == 1
    assert f"[server] bind(127.0.0.1:{port}) failed: " in sim.log()


def test_missing_target_refuses_to_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*sim_command(), str(tmp_path / "missing.gguf"), "--port", str(free_port())],
        env=child_env(None), capture_output=True, text=True, timeout=30, check=False,
    )
    assert done.returncode == 1 and "missing.gguf" in done.stderr and "[server] backend creation failed" in done.stderr


def test_not_listening_while_loading_and_term_kills_it_then(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_STARTUP_DELAY": "60"}, wait=False)
    wait_log(sim, "[model_card]")  # loading
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{sim.url}/health", timeout=5)
    assert sim.proc.poll() is None, sim.log()  # loading, not dead
    sim.proc.send_signal(signal.SIGTERM)  # no handler yet: the default action, like the real binary
    assert sim.proc.wait(timeout=20) == -signal.SIGTERM


def test_loading_503_fault_answers_503_until_loaded(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_STARTUP_DELAY": "60", "DS4SIM_FAULTS": "loading-503"}, wait=False)
    while True:  # until it listens; it keeps loading for a minute, far longer than this takes
        assert sim.proc.poll() is None, sim.log()
        try:
            health = requests.get(f"{sim.url}/health", timeout=5)
            break
        except requests.ConnectionError:
            time.sleep(0.02)
    assert health.status_code == 503 and health.json()["error"]["message"] == "Loading model"
    assert requests.post(f"{sim.url}/v1/chat/completions", json=chat_body("x"), timeout=5).status_code == 503
    assert stop_sim(sim) == 0


def test_sigterm_and_sigint_exit_0_after_the_teardown(sims: Starter) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        sim = sims({**common_env(), "DS4SIM_TEARDOWN_DELAY": "0.3"})
        ask(sim, PROMPT, max_tokens=4)
        sim.proc.send_signal(signum)
        assert sim.proc.wait(timeout=20) == 0
        assert f"[server] signal {int(signum)}: stopping" in sim.log()
        assert "freeing model weights (0.3 s)" in sim.log()


def test_sigterm_lets_the_in_flight_generation_finish_and_answer(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]]
) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 3), "DS4SIM_TOKEN_DELAY": "0.03"})  # ~3 s for 96 tokens
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(ask, sim, PROMPT)
        wait_log(sim, f"chatcmpl-sim{sim.proc.pid}x0 ")
        queued = pool.submit(ask, sim, OTHER_PROMPT, 8)
        wait_log(sim, f"chatcmpl-sim{sim.proc.pid}x1 ")
        sim.proc.send_signal(signal.SIGTERM)
        response, _ = first.result(timeout=30)
        second, _ = queued.result(timeout=30)
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 96
    assert second.status_code == 200 and second.json()["usage"]["completion_tokens"] == 8  # queued ones too
    assert sim.proc.wait(timeout=20) == 0
    lines = sim.log().splitlines()
    stop = next(i for i, line in enumerate(lines) if line.startswith("[server] signal 15: stopping"))
    found = traces(lines)
    assert [trace_ids(t) for t in found] == [reference[PROMPT], reference[OTHER_PROMPT][:8]]
    assert stop < lines.index(found[0].group(0))  # the generation went on after the signal
    assert lines.index(found[1].group(0)) < next(i for i, line in enumerate(lines) if "freeing model weights" in line)


def test_slow_teardown_stays_after_answering(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "slow-teardown"})
    response, _ = ask(sim, PROMPT, max_tokens=4)
    assert response.status_code == 200
    sim.proc.send_signal(signal.SIGTERM)
    wait_log(sim, "freeing model weights (120.0 s)")
    with pytest.raises(subprocess.TimeoutExpired):
        sim.proc.wait(timeout=1.0)  # still freeing the weights
    kill_group(sim)
    assert sim.proc.returncode == -signal.SIGKILL


def test_console_script_and_module_agree(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("ds4ci-sim")
    if not script.exists():
        pytest.skip("ds4ci-sim console script not installed in this environment")
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30, check=True)
    mod = subprocess.run([*sim_command(), "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout == mod.stdout and out.stdout.startswith("ds4ci-sim ")


def test_list_faults_names_every_fault() -> None:
    done = subprocess.run([*sim_command(), "--list-faults"], capture_output=True, text=True, timeout=30, check=True)
    assert {line.split()[0] for line in done.stdout.splitlines()} == set(FAULTS)


def test_import_is_stdlib_only() -> None:
    code = (
        "import sys, ds4ci.simulator.main\n"
        "heavy = {'requests', 'typer', 'jinja2', 'github', 'jsonschema', 'numpy'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == "[]"


def test_docs_describe_every_fault() -> None:
    doc = (ROOT / "docs" / "simulator.md").read_text(encoding="utf-8")
    for name in FAULTS:
        assert f"`{name}`" in doc, name


def test_sim_exited_reports_the_log(tmp_path: Path) -> None:
    with pytest.raises(SimExited, match="unknown fault"):
        start_sim(tmp_path, env={"DS4SIM_FAULTS": "bogus"})
