"""The reference server (``ds4ci-refserver``) as real subprocesses on 127.0.0.1, on the CPU.

A small model (2 layers, 128 wide, 32 tokens) keeps the run short. It runs in bfloat16, where the
CPU's batched and single-token kernels round differently: the approximate verifier then drifts
from greedy on these prompts (the control test shows it), so reference-exact equalling greedy is
a real result, not an accident of float32. Protocol lines are read with the gate's own trace
parser, the summary with a regex of its exact format. Command-line, model-file and environment
checks need no PyTorch; everything that loads a model is skipped without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from ds4ci.judging.protocol import BANNER_PREFIX, TRACE_TAG, parse_trace
from ds4ci.refserver.args import HIP_ONLY_MESSAGE, torch_device_name
from ds4ci.refserver.env import EnvError, read_env
from ds4ci.refserver.modelfile import MAGIC, Arch, ModelFileError, read_model_file, write_model_file

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="PyTorch is not installed: the reference server needs it (pip install torch; CPU torch is enough)",
)

SUMMARY = re.compile(
    r"^\[ds4-spec\] gen=(?P<gen>\d+) steps=(?P<steps>\d+) matched=(?P<matched>\d+) offered=(?P<offered>\d+) "
    r"mean_accept=(?P<a>\d+\.\d\d)/(?P<b>\d+\.\d\d) q_cap=(?P<q>\d+) full_snap=1$"
)
SMALL = Arch(vocab=1024, dim=128, layers=2, heads=8, ffn=352)
# Chosen so that every prompt sees a rejection at q=2,3,4, and the approximate verifier drifts from
# greedy on some (on the CPU this was written on).
PROMPTS = (
    "Explain why speculative decoding must match greedy decoding token for token.",
    "Count to ten.",
    "Why bfloat16?",
)
MAX_TOKENS = 32
STARTUP_DEADLINE_S = 180.0  # only bounds a hung start; nothing is asserted about speed


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_", "LUCE_", "DS4REF_"))}
    env.update({"DS4REF_DTYPE": "bfloat16", "DS4REF_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _argv(target: Path, port: int, *extra: str, device: str = "cpu") -> list[str]:
    return [sys.executable, "-m", "ds4ci.refserver", str(target), "--host", "127.0.0.1", "--port", str(port),
            "--max-ctx", "4096", "--chunk", "64", "--target-device", device, "--ds4-prefill", "exact", *extra]


@dataclass
class Reply:
    body: dict[str, Any]
    headers: Mapping[str, str]
    lines: list[str]

    def traces(self) -> list[Any]:
        return [parse_trace(line[len(TRACE_TAG):]) for line in self.lines if line.startswith(TRACE_TAG)]

    def summaries(self) -> list[re.Match[str]]:
        found = [line for line in self.lines if line.startswith("[ds4-spec] gen=")]
        matches = [SUMMARY.match(line) for line in found]
        assert all(matches), f"summary lines not in the exact format: {found}"
        return [m for m in matches if m is not None]

    def banners(self) -> int:
        return sum(line.startswith(BANNER_PREFIX) for line in self.lines)


class RefServer:
    def __init__(self, tmp: Path, target: Path, env: Mapping[str, str], name: str) -> None:
        self.port = _free_port()
        self.log_path = tmp / f"{name}.stderr.log"
        with self.log_path.open("wb") as err:
            self.proc = subprocess.Popen(_argv(target, self.port), env=_clean_env(env), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                answer = requests.get(f"{self.url}/health", timeout=5)
            except requests.ConnectionError:
                time.sleep(0.05)
                continue
            assert answer.status_code == 200 and answer.json() == {"status": "ok"}, answer.text
            return
        raise AssertionError(f"server did not answer /health within {STARTUP_DEADLINE_S:g} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def ask(self, prompt: str, max_tokens: int = MAX_TOKENS, **fields: Any) -> Reply:
        before = self.log_path.stat().st_size
        body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "top_p": 1, "top_k": 0,
                "seed": 1234, "max_tokens": max_tokens, "frequency_penalty": 0, "presence_penalty": 0,
                "repetition_penalty": 1, "stream": False, **fields}
        answer = requests.post(f"{self.url}/v1/chat/completions", json=body, timeout=600)
        assert answer.status_code == 200, answer.text
        with self.log_path.open("rb") as fh:  # every line of a request is flushed before its response
            fh.seek(before)
            lines = fh.read().decode("utf-8").splitlines()
        return Reply(answer.json(), answer.headers, lines)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"server ignored SIGTERM:\n{self.log()}") from None


def spec_env(draft: Path, q: int, prefix: str = "DFLASH_DS4_") -> dict[str, str]:
    return {f"{prefix}SPEC": "1", f"{prefix}DRAFT": str(draft), f"{prefix}SPEC_Q": str(q),
            f"{prefix}SPEC_REFERENCE_EXACT": "1", f"{prefix}EXACT_VERIFY_TRACE": "1"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("refmodels")
    write_model_file(root / "target.gguf", arch=SMALL)
    write_model_file(root / "draft.gguf", draft_noise=0.05)
    return root / "target.gguf", root / "draft.gguf"


@pytest.fixture(scope="module")
def servers(models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RefServer]]:
    target, draft = models
    tmp = tmp_path_factory.mktemp("reflogs")
    started: dict[str, RefServer] = {}
    try:
        started["target-only"] = RefServer(tmp, target, {"DFLASH_DS4_EXACT_VERIFY_TRACE": "1"}, "target-only")
        for q in (2, 3, 4):
            started[f"q{q}"] = RefServer(tmp, target, spec_env(draft, q), f"q{q}")
        yield started
    finally:
        codes = {name: server.stop() for name, server in started.items()}
        assert all(code == 0 for code in codes.values()), codes


# -- no PyTorch needed -------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cuda:0", "cpu:0"])
@pytest.mark.parametrize("flag", [["--ds4-fused-decode"], ["--ds4-expert-top-k", "8"]])
def test_hip_only_options_refused_off_hip_with_the_real_message(tmp_path: Path, device: str, flag: list[str]) -> None:
    done = subprocess.run(_argv(tmp_path / "absent.gguf", 1, *flag, device=device), env=_clean_env({}),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == HIP_ONLY_MESSAGE


@pytest.mark.parametrize("extra", [["--no-such-option"], ["--max-c", "4096"], ["--ds4-prefill", "turbo"],
                                   ["--port", "0"], ["--target-device", "tpu:0"]])
def test_unknown_or_malformed_options_exit_2(tmp_path: Path, extra: list[str]) -> None:
    done = subprocess.run(_argv(tmp_path / "absent.gguf", 8080, *extra), env=_clean_env({}),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr


def test_hip_devices_are_torch_cuda_devices() -> None:
    assert torch_device_name("hip:1") == "cuda:1"
    assert torch_device_name("cuda:0") == "cuda:0"
    assert torch_device_name("cpu") == torch_device_name("cpu:0") == "cpu"


def test_model_file_header_is_the_architecture_and_bytes_are_the_identity(tmp_path: Path) -> None:
    sha = write_model_file(tmp_path / "t.gguf", arch=SMALL)
    found = read_model_file(tmp_path / "t.gguf", "target")
    assert (found.arch, found.sha256, found.has_header) == (SMALL, sha, True)
    (tmp_path / "plain.gguf").write_bytes(b"GGUF not a reference model")
    assert read_model_file(tmp_path / "plain.gguf", "target").arch == Arch()
    plain_draft = read_model_file(tmp_path / "plain.gguf", "draft")
    assert (plain_draft.arch, plain_draft.noise) == (None, 0.02)


@pytest.mark.parametrize(("text", "role", "expected"), [
    (f"{MAGIC} {{not json\n", "target", "malformed"),
    (f"{MAGIC} {{\"arch\": {{\"dim\": 100, \"heads\": 8}}}}\n", "target", "multiple of arch.heads"),
    (f"{MAGIC} {{\"arch\": {{\"layers\": 0}}}}\n", "target", "arch.layers must be an integer in 1..64"),
    (f"{MAGIC} {{\"arch\": {{\"depth\": 3}}}}\n", "target", "unknown arch field(s) depth"),
    (f"{MAGIC} {{\"draft_of_target\": {{\"noise\": 0.1}}}}\n", "target", "cannot be 'draft_of_target'"),
    (f"{MAGIC} {{\"draft_of_target\": {{\"noise\": 2}}}}\n", "draft", "noise must be a number in 0..1"),
    (f"{MAGIC} {{}}\n", "draft", "exactly one of 'arch' and 'draft_of_target'"),
    (f"{MAGIC} {{\"arch\": {{}}}}", "target", "not terminated"),
])
def test_malformed_model_file_headers_are_refused(tmp_path: Path, text: str, role: str, expected: str) -> None:
    path = tmp_path / "m.gguf"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ModelFileError, match=re.escape(expected)):
        read_model_file(path, role)


def test_environment_reads_either_prefix_and_refuses_disagreement() -> None:
    luce = read_env({"LUCE_DS4_SPEC": "1", "LUCE_DS4_SPEC_Q": "3", "LUCE_DS4_SPEC_REFERENCE_EXACT": "1"})
    assert (luce.spec, luce.q, luce.reference_exact, luce.approximate) == (True, 3, True, False)
    both = read_env({"DFLASH_DS4_SPEC_Q": "4", "LUCE_DS4_SPEC_Q": "4"})
    assert both.q == 4
    with pytest.raises(EnvError, match="disagree"):
        read_env({"DFLASH_DS4_SPEC_Q": "2", "LUCE_DS4_SPEC_Q": "3"})
    with pytest.raises(EnvError, match="DS4_SPEC must be 0 or 1"):
        read_env({"DFLASH_DS4_SPEC": "yes"})
    leak = read_env({"DFLASH_DS4_SPEC_REFERENCE_EXACT": "1", "DS4REF_LEAK_FUSED_VERIFY": "1"})
    assert (leak.approximate, leak.claims_reference_exact) == (True, True)
    fused = read_env({"DFLASH_DS4_SPEC_REFERENCE_EXACT": "1", "DFLASH_DS4_FUSED_VERIFY": "1"})
    assert (fused.approximate, fused.claims_reference_exact) == (True, False)


# -- real servers --------------------------------------------------------------------------------


@needs_torch
@pytest.mark.slow
def test_reference_exact_equals_target_only_with_rejections(servers: dict[str, RefServer]) -> None:
    for index, prompt in enumerate(PROMPTS):
        greedy = servers["target-only"].ask(prompt)
        (plain,) = greedy.traces()
        assert (plain.reference_exact, plain.speculation, plain.n) == (0, 0, MAX_TOKENS)
        assert greedy.summaries() == [] and greedy.banners() == 0
        assert greedy.body["usage"]["completion_tokens"] == MAX_TOKENS
        for q in (2, 3, 4):
            replies = [servers[f"q{q}"].ask(prompt) for _ in range(2)]
            for reply in replies:
                (trace,) = reply.traces()
                (summary,) = reply.summaries()
                assert reply.banners() == 1
                assert (trace.reference_exact, trace.speculation) == (1, 1)
                assert trace.ids == plain.ids, f"prompt {index} q={q}: reference-exact differs from greedy"
                steps, matched, offered = (int(summary[k]) for k in ("steps", "matched", "offered"))
                assert int(summary["gen"]) == trace.n - 1 and int(summary["q"]) == q
                assert steps > 0 and 0 < matched < offered, f"prompt {index} q={q}: {summary.group(0)}"
                assert summary["a"] == f"{matched / steps:.2f}" and summary["b"] == f"{offered / steps:.2f}"
            assert replies[0].traces() == replies[1].traces()
            assert replies[0].summaries()[0].group(0) == replies[1].summaries()[0].group(0)


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("penalty", [{"presence_penalty": 0.5}, {"repetition_penalty": 1.1},
                                     {"rep_pen": 1.2, "repetition_penalty": None}])
def test_a_penalty_sends_the_speculative_arm_to_plain_decoding(servers: dict[str, RefServer], penalty: dict[str, float]) -> None:
    reply = servers["q3"].ask(PROMPTS[0], **penalty)
    (trace,) = reply.traces()
    assert (trace.reference_exact, trace.speculation, trace.n) == (1, 0, MAX_TOKENS)
    assert reply.summaries() == [] and reply.banners() == 0


@needs_torch
@pytest.mark.slow
def test_http_surface(servers: dict[str, RefServer]) -> None:
    server = servers["q2"]
    props = requests.get(f"{server.url}/props", timeout=30).json()
    assert props["server"] == {"name": "ds4ci-refserver", "version": props["server"]["version"]}
    assert props["settings"]["spec"] is True and props["settings"]["reference_exact"] is True
    reply = server.ask(PROMPTS[1], max_tokens=5)
    assert reply.headers["Connection"] == "close"
    assert reply.body["object"] == "chat.completion"
    assert reply.body["choices"][0]["finish_reason"] == "length"
    assert set(reply.body["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens", "timings", "accept_rate"}
    for bad in ({"temperature": 0.7}, {"max_tokens": 0}, {"stop": 5}, {"repetition_penalty": 1.1, "rep_pen": 1.2}):
        body = {"messages": [{"role": "user", "content": "x"}], **bad}
        answer = requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
        assert answer.status_code == 400, (bad, answer.text)
    answer = requests.post(f"{server.url}/v1/chat/completions", data=b"{nope", timeout=60)
    assert answer.status_code == 400 and "not valid JSON" in answer.json()["error"]["message"]
    stream = requests.post(f"{server.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "x"}], "temperature": 0, "max_tokens": 4, "stream": True})
    events = [line[6:] for line in stream.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["usage"]["completion_tokens"] == 4


@needs_torch
@pytest.mark.slow
def test_fused_verifier_is_approximate_and_says_so(models: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = models
    env = {**spec_env(draft, 3, prefix="LUCE_DS4_"), "LUCE_DS4_FUSED_VERIFY": "1"}  # the newer prefix alone
    server = RefServer(tmp_path, target, env, "fused")
    try:
        reply = server.ask(PROMPTS[0])
    finally:
        assert server.stop() == 0
    (trace,) = reply.traces()
    (summary,) = reply.summaries()
    assert (trace.reference_exact, trace.speculation, trace.n) == (0, 1, MAX_TOKENS)
    assert reply.banners() == 0 and int(summary["steps"]) > 0


@needs_torch
@pytest.mark.slow
def test_control_leaked_approximate_verifier_drifts_from_greedy(servers: dict[str, RefServer], models: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    """The exactness test above is only worth something if approximate verification differs here."""
    target, draft = models
    server = RefServer(tmp_path, target, {**spec_env(draft, 4), "DS4REF_LEAK_FUSED_VERIFY": "1"}, "leak")
    try:
        replies = [server.ask(prompt) for prompt in PROMPTS]
    finally:
        assert server.stop() == 0
    differs = []
    for prompt, reply in zip(PROMPTS, replies, strict=True):
        (trace,) = reply.traces()
        assert (trace.reference_exact, trace.speculation) == (1, 1) and reply.banners() == 1  # the leak hides
        (greedy,) = servers["target-only"].ask(prompt).traces()
        differs.append(trace.ids != greedy.ids)
    if not any(differs):
        pytest.skip("this CPU's bfloat16 kernels round the batched verification like single-token steps: "
                    "the approximate verifier agreed with greedy on every prompt, so the control cannot be shown here")
    assert any(differs)


@needs_torch
@pytest.mark.slow
def test_a_draft_that_does_not_load_means_no_speculation(models: tuple[Path, Path], tmp_path: Path) -> None:
    target, _ = models
    broken = tmp_path / "broken-draft.gguf"
    broken.write_text(f"{MAGIC} {{\"arch\": {{\"vocab\": 512}}}}\n", encoding="utf-8")  # vocabulary differs
    server = RefServer(tmp_path, target, spec_env(broken, 2), "broken")
    try:
        reply = server.ask(PROMPTS[0])
    finally:
        assert server.stop() == 0
    (trace,) = reply.traces()
    assert (trace.speculation, trace.n) == (0, MAX_TOKENS)
    assert reply.summaries() == [] and reply.banners() == 0
    assert "[ds4-spec] draft not loaded (draft vocabulary 512 differs from the target's 1024)" in server.log()


@needs_torch
@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight_and_requests_are_serialized(models: tuple[Path, Path],
                                                                            tmp_path: Path) -> None:
    target, _ = models
    server = RefServer(tmp_path, target, {"DFLASH_DS4_EXACT_VERIFY_TRACE": "1"}, "sigterm")
    long_tokens = 800  # ~4 s of CPU decoding: in flight long after the next request and the SIGTERM arrive
    answers: dict[str, Reply] = {}

    def ask(name: str, tokens: int) -> None:
        answers[name] = server.ask(PROMPTS[0], max_tokens=tokens)

    first = threading.Thread(target=ask, args=("long", long_tokens))
    first.start()
    while "new task" not in server.log():
        assert server.proc.poll() is None, server.log()
        time.sleep(0.01)
    second = threading.Thread(target=ask, args=("short", 3))
    second.start()
    first.join()
    second.join()
    log = server.log().splitlines()
    starts = [i for i, line in enumerate(log) if "new task" in line]
    ends = [i for i, line in enumerate(log) if "| done," in line]
    assert len(starts) == len(ends) == 2 and starts[0] < ends[0] < starts[1] < ends[1], "requests overlapped"

    third = threading.Thread(target=ask, args=("in-flight", long_tokens))
    third.start()
    while server.log().count("new task") < 3:
        assert server.proc.poll() is None, server.log()
        time.sleep(0.01)
    server.proc.send_signal(signal.SIGTERM)
    third.join()
    assert server.stop() == 0
    assert answers["in-flight"].body["usage"]["completion_tokens"] == long_tokens
    log = server.log().splitlines()
    signalled = next(i for i, line in enumerate(log) if "received SIGTERM" in line)
    finished = max(i for i, line in enumerate(log) if "| done," in line)
    assert signalled < finished, "the SIGTERM line should come before the in-flight request finished"
    assert log[-1] == "main: stopped cleanly"


# -- ds4ci selftest ------------------------------------------------------------------------------

_SHOW_ENV = [sys.executable, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], "
             "{k: v for k, v in os.environ.items() if k.startswith('DS4REF_')}]))"]


@pytest.mark.parametrize("leak", [False, True])
@pytest.mark.parametrize("spec_var", [None, "DFLASH_DS4_SPEC", "LUCE_DS4_SPEC"])
def test_selftest_wrapper_leaks_only_into_the_speculative_arm(tmp_path: Path, leak: bool, spec_var: str | None) -> None:
    from ds4ci.commands.selftest import write_wrapper

    wrapper = write_wrapper(tmp_path / "server", "bfloat16", "cuda:0", leak=leak, command=_SHOW_ENV)
    env = _clean_env({} if spec_var is None else {spec_var: "1"})
    env.pop("DS4REF_DTYPE")
    done = subprocess.run([str(wrapper), "target.gguf", "--port", "1"], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    argv, seen = json.loads(done.stdout)
    assert argv == ["target.gguf", "--port", "1"]
    assert seen.pop("DS4REF_DTYPE") == "bfloat16"
    assert seen.pop("DS4REF_THREADS") == "1"  # from _clean_env: the wrapper sets threads only on the CPU
    assert seen == ({"DS4REF_LEAK_FUSED_VERIFY": "1"} if leak and spec_var else {})


def _arm(exit_code: int, mismatch: dict[str, Any] | None = None, reasons: tuple[str, ...] = ()) -> Any:
    from ds4ci.commands.selftest import Arm

    doc = {"reasons": list(reasons), "widths": [{"q": 3, "prompts": [{"prompt_index": 1, "mismatch": mismatch}]}]}
    return Arm("leak", "r-leak", Path("w"), Path("r.json"), exit_code=exit_code, doc=doc)


@pytest.mark.parametrize(("exit_code", "mismatch", "dtype", "expected", "text"), [
    (1, {"position": 47, "target_ids": [1], "spec_ids": [2]}, "bfloat16", True, "CAUGHT (exit 1): token IDs differ "
                                                                                 "(q=3 prompt 1 at position 47)"),
    (1, None, "bfloat16", False, "but on no token mismatch"),
    (0, None, "float32", True, "approximate verifier agreed on this stack"),
    (0, None, "bfloat16", False, "NOT CAUGHT in bfloat16"),
    (3, None, "bfloat16", False, "gave no verdict (exit 3"),
])
def test_selftest_judges_the_leak_run(exit_code: int, mismatch: dict[str, Any] | None, dtype: str, expected: bool,
                                      text: str) -> None:
    from ds4ci.commands.selftest import leak_outcome

    outcome = leak_outcome(_arm(exit_code, mismatch, ("some reason",)), dtype)
    assert outcome.expected is expected
    assert text in outcome.text


@needs_torch
@pytest.mark.slow
def test_selftest_end_to_end_on_cpu(tmp_path: Path) -> None:
    """The whole self-test through the CLI: both gate runs, report, verify where it exists.

    float32 on the CPU: the leak may be caught or may agree with greedy; both are as expected.
    """
    work = tmp_path / "selftest"
    done = subprocess.run(
        [sys.executable, "-c", "from ds4ci.cli import main; main()", "selftest", "--device", "cpu", "--dtype", "float32",
         "--prompts", "1", "--max-tokens", "32", "--widths", "2", "--workdir", str(work), "--runner", "cpu-selftest"],
        env=_clean_env({}), cwd=tmp_path, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads((work / "selftest.json").read_text(encoding="utf-8"))
    assert summary["passed"] is True
    assert summary["arms"][0]["exit_code"] == 0
    assert summary["arms"][1]["exit_code"] in (0, 1)
    assert "reference-exact speculation PASSED the gate" in done.stdout
    assert (work / "report.md").stat().st_size > 0
