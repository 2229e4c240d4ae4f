"""ds4ci-sim as a real process on loopback: protocol, toy model, fault switches, lifecycle."""

from __future__ import annotations

import concurrent.futures
import hashlib
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

from ds4ci.simulator import model
from ds4ci.simulator.engine import render_chat
from ds4ci.simulator.faults import FAULTS, Arm, parse_faults
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
        (trace,) = traces(lines)
        assert (trace.group("ref"), trace.group("spec")) == ("1", "1")
        assert len(banners(lines)) == 1
        (summary,) = summaries(lines)
        c = counters(summary)
        assert c["steps"] > 0 and c["offered"] == c["steps"] * (q - 1)
        assert c["matched"] < c["offered"], "no draft was rejected"
        assert c["gen"] == 1 + c["steps"] + c["matched"] >= len(ids) == 96
        assert c["q"] == q and c["snap"] == 1
        # The banner comes right before the summary, inside the request's window.
        assert lines.index(banners(lines)[0]) == lines.index(summary) - 1
        body = response.json()
        assert body["usage"]["completion_tokens"] == 96
        assert body["choices"][0]["message"]["content"] == model.detokenize(ids)
    assert stop_sim(sim) == 0


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


def test_same_request_same_answer_and_seed_ignored(sims: Starter, tmp_path: Path) -> None:
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
    assert props["server"]["name"] == "ds4ci-sim" and props["server"]["version"]
    assert props["model"]["target_sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    assert props["model"]["draft_sha256"] == hashlib.sha256(draft.read_bytes()).hexdigest()
    settings = props["settings"]
    assert settings["port"] == sim.port and settings["target_device"] == "hip:0"
    assert (settings["max_ctx"], settings["chunk"], settings["fused_decode"]) == (4096, 512, True)
    assert (settings["spec"], settings["q"], settings["reference_exact"]) == (True, 2, True)
    assert settings["adaptive_width"] is False and settings["mmvq_max_ncols"] == 8
    response, _ = ask(sim, "hi", max_tokens=5)
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"] == {
        "prompt_tokens": len(render_chat([{"role": "user", "content": "hi"}]).encode()) + 1,
        "completion_tokens": 5,
        "total_tokens": body["usage"]["prompt_tokens"] + 5,
    }


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
        b'{"messages": [{"role": "user", "content": "x"}], "temperature": 0.7}',
        b'{"messages": [{"role": "user", "content": "x"}], "stream": true}',
        b'{"messages": [{"role": "user", "content": "x"}], "seed": "1"}',
        b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}',
    ],
)
def test_malformed_request_is_400_json(plain: Sim, body: bytes) -> None:
    response = requests.post(
        f"{plain.url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}, timeout=5
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 400


def test_unknown_path_is_404(plain: Sim) -> None:
    assert requests.get(f"{plain.url}/nope", timeout=5).status_code == 404
    assert requests.post(f"{plain.url}/v1/completions", json={}, timeout=5).status_code == 404


def test_requests_are_processed_one_at_a_time(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_TOKEN_DELAY": "0.02"})
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [
            pool.submit(requests.post, f"{sim.url}/v1/chat/completions", json=chat_body(p, 20), timeout=30)
            for p in ("a", "b", "c")
        ]
        assert all(f.result().status_code == 200 for f in futures)
    events = [line for line in sim.log().splitlines() if line.startswith("slot 0: id")]
    kinds = ["new" if "new task" in e else "stop" for e in events]
    assert kinds == ["new", "stop"] * 3  # never two requests in flight at once


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
        assert spec.ids == greedy.ids
        assert spec.gen == 1 + spec.steps + spec.matched >= 96
        assert spec.offered == spec.steps * (q - 1)
        matched, offered = matched + spec.matched, offered + spec.offered
        approx = model.decode_spec(target, draft, prompt, 96, q, exact=False)
        assert approx.ids != greedy.ids
    # Real runs: q=2 46/49, q=3 60/70, q=4 67/84 -> acceptance 0.94, 0.86, 0.80.
    assert 0.7 < matched / offered < 0.97


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


def _check_old_summary(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert "matched=" not in summary and "offered=" not in summary
    assert re.match(r"^\[ds4-spec\] gen=\d+ steps=\d+ mean_accept=\d+/\d+ q_cap=3 full_snap=1$", summary)


def _check_float_counters(lines: list[str], ref: list[int]) -> None:
    (summary,) = summaries(lines)
    assert re.search(r" matched=\d+\.0 offered=\d+\.0 ", summary) and SUMMARY.match(summary) is None


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
    "old-summary": _check_old_summary,
    "float-counters": _check_float_counters,
    "extra-summary-fields": _check_extra_summary_fields,
    "no-full-snap": _check_no_full_snap,
    "capture-token0": _check_capture_token0,
    "mismatch-last": _check_mismatch_last,
    "leak-fused-verify": _check_leak_fused_verify,
}


@pytest.mark.parametrize("fault", sorted(SINGLE_REQUEST_CHECKS))
def test_spec_arm_fault_is_observable(
    sims: Starter, tmp_path: Path, reference: dict[str, list[int]], fault: str
) -> None:
    _, lines = _spec_window(sims, tmp_path, fault)
    SINGLE_REQUEST_CHECKS[fault](lines, reference[PROMPT])


def test_every_fault_has_a_test() -> None:
    repeat = {"second-request-differs", "repeat-counters-differ", "luce-prefix"}
    lifecycle = {"exit-before-ready", "exit-mid-request", "hang-request", "ignore-sigterm", "fork-helper", "http-error"}
    assert set(FAULTS) == set(SINGLE_REQUEST_CHECKS) | TARGET_FAULTS | repeat | lifecycle


def test_spec_faults_leave_the_target_arm_alone(sims: Starter, reference: dict[str, list[int]]) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": ",".join(sorted(SPEC_LOG_FAULTS))})
    for _ in range(2):
        _, lines = ask(sim, PROMPT)
        assert one_trace(lines) == reference[PROMPT]
        assert (traces(lines)[0].group("ref"), traces(lines)[0].group("spec")) == ("0", "0")
        assert summaries(lines) == [] and banners(lines) == []


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
        sim = sims({**spec_env(draft, q), "DS4SIM_FAULTS": "mismatch-last@q3"})
        _, lines = ask(sim, PROMPT)
        assert (one_trace(lines) != reference[PROMPT]) is broken


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


def test_luce_prefix_reads_the_newer_family_first(sims: Starter, tmp_path: Path, reference: dict[str, list[int]]) -> None:
    _, draft = make_models(tmp_path)
    luce_only = {k.replace("DFLASH_DS4_", "LUCE_DS4_"): v for k, v in spec_env(draft, 3).items()}
    # Without the switch the LUCE_DS4_* names mean nothing: a plain target-only server.
    plain = sims(luce_only)
    _, lines = ask(plain, PROMPT)
    assert summaries(lines) == [] and traces(lines) == []
    # With it, the newer names alone turn speculation on ...
    newer = sims({**luce_only, "DS4SIM_FAULTS": "luce-prefix"})
    _, lines = ask(newer, PROMPT)
    assert one_trace(lines) == reference[PROMPT] and len(summaries(lines)) == 1
    # ... and win over the old names (so an inherited LUCE_DS4_* leaks unless the gate strips it).
    leaked = sims({**spec_env(draft, 3), "LUCE_DS4_FUSED_VERIFY": "1", "DS4SIM_FAULTS": "luce-prefix"})
    _, lines = ask(leaked, PROMPT)
    assert one_trace(lines) != reference[PROMPT]
    assert requests.get(f"{leaked.url}/props", timeout=5).json()["settings"]["env_prefix"] == "LUCE_DS4_"


def test_http_error(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "http-error"})
    response, lines = ask(sim, PROMPT)
    assert response.status_code == 500 and "error" in response.json()
    assert traces(lines) == []


def test_exit_before_ready(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "exit-before-ready"}, wait=False)
    assert sim.proc.wait(timeout=20) == 1
    assert "exit-before-ready" in sim.log()


def test_exit_mid_request(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "exit-mid-request"})
    with pytest.raises(requests.ConnectionError):
        ask(sim, PROMPT)
    assert sim.proc.wait(timeout=20) == 1


def test_hang_request_never_answers_but_stops_on_term(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "hang-request"})
    with pytest.raises(requests.ReadTimeout):
        ask(sim, PROMPT, timeout=1.0)
    assert requests.get(f"{sim.url}/health", timeout=5).status_code == 200  # alive, just stuck
    assert stop_sim(sim) == 0


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


def test_unknown_fault_refused(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "mismatch-last,no-such-fault"}, wait=False)
    assert sim.proc.wait(timeout=20) == 2
    assert "no-such-fault" in sim.log()


def test_luce_prefix_cannot_be_scoped(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_FAULTS": "luce-prefix@spec"}, wait=False)
    assert sim.proc.wait(timeout=20) == 2


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
    "flags",
    [["--port", "1", "--no-such-flag"], ["--port", "1", "--max"], ["--port", "1", "--target-device", "gpu0"], []],
)
def test_bad_command_line_exits_2_on_stderr(tmp_path: Path, flags: list[str]) -> None:
    if not flags:  # no TARGET at all
        done = subprocess.run(sim_command(), capture_output=True, text=True, timeout=30, check=False)
    else:
        done = _run_sim(tmp_path, flags)
    assert done.returncode == 2 and done.stdout == "" and "usage:" in done.stderr


def test_port_taken_exits_1(sims: Starter) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sim = sims(common_env(), port=port, wait=False)
        assert sim.proc.wait(timeout=20) == 1
    assert str(port) in sim.log() and "bind" in sim.log()


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"LUCE_MMVQ_MAX_NCOLS": "2", "DFLASH_DS4_SPEC_Q": "3"}, "LUCE_MMVQ_MAX_NCOLS=2"),
        ({"DFLASH_DS4_DRAFT": ""}, "DRAFT"),
        ({"DFLASH_DS4_DRAFT": "/nonexistent/draft.gguf"}, "draft"),
        ({"DFLASH_DS4_SPEC_Q": "1"}, "width"),
        ({"DFLASH_DS4_SPEC_REFERENCE_EXACT": "yes"}, "0 or 1"),
    ],
)
def test_bad_environment_refuses_to_start(tmp_path: Path, env: dict[str, str], needle: str) -> None:
    _, draft = make_models(tmp_path)
    done = _run_sim(tmp_path, ["--port", str(free_port())], {**spec_env(draft, 2), **env})
    assert done.returncode == 1 and needle in done.stderr


def test_mmvq_equal_to_q_is_fine(sims: Starter, tmp_path: Path) -> None:
    _, draft = make_models(tmp_path)
    sim = sims({**spec_env(draft, 4), "LUCE_MMVQ_MAX_NCOLS": "4"})
    assert stop_sim(sim) == 0


def test_missing_target_refuses_to_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*sim_command(), str(tmp_path / "missing.gguf"), "--port", str(free_port())],
        env=child_env(None), capture_output=True, text=True, timeout=30, check=False,
    )
    assert done.returncode == 1 and "missing.gguf" in done.stderr


def test_loading_answers_503_and_sigterm_exits_0(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_STARTUP_DELAY": "60"}, wait=False)
    while True:  # until it listens; it keeps loading for a minute, far longer than this takes
        assert sim.proc.poll() is None, sim.log()
        try:
            health = requests.get(f"{sim.url}/health", timeout=5)
            break
        except requests.ConnectionError:
            time.sleep(0.02)
    assert health.status_code == 503 and "error" in health.json()
    assert requests.post(f"{sim.url}/v1/chat/completions", json=chat_body("x"), timeout=5).status_code == 503
    assert stop_sim(sim) == 0


def test_listen_late_is_not_listening_while_loading(sims: Starter) -> None:
    sim = sims({**common_env(), "DS4SIM_STARTUP_DELAY": "60", "DS4SIM_LISTEN_LATE": "1"}, wait=False)
    wait_log(sim, "load_model: target")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{sim.url}/health", timeout=5)
    assert sim.proc.poll() is None, sim.log()  # loading, not dead
    assert stop_sim(sim) == 0


def test_sigterm_and_sigint_exit_0(sims: Starter) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        sim = sims(common_env())
        ask(sim, PROMPT, max_tokens=4)
        sim.proc.send_signal(signum)
        assert sim.proc.wait(timeout=20) == 0
        assert "shutting down" in sim.log()


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
    doc = (Path(__file__).resolve().parent.parent / "docs" / "simulator.md").read_text(encoding="utf-8")
    for name in FAULTS:
        assert f"`{name}`" in doc, name


def test_sim_exited_reports_the_log(tmp_path: Path) -> None:
    with pytest.raises(SimExited, match="unknown fault"):
        start_sim(tmp_path, env={"DS4SIM_FAULTS": "bogus"})
