"""The independent protocol speaker (tests/servers/foreign_server.py) as a real process on loopback."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from paths import TESTS

from tests.simproc import SUMMARY, TRACE, chat_body, child_env, free_port

FOREIGN = TESTS / "servers" / "foreign_server.py"
UPSTREAM_LINES = TESTS / "data" / "real-server" / "upstream-gate-lines.txt"


@dataclass
class Foreign:
    proc: subprocess.Popen[bytes]
    port: int
    err: Path
    out: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lines(self) -> list[str]:
        return self.err.read_text().splitlines()

    def ask(self, max_tokens: int = 12, **fields: object) -> requests.Response:
        return requests.post(f"{self.url}/v1/chat/completions", json=chat_body("hello", max_tokens, **fields), timeout=10)


Starter = Callable[..., "Foreign"]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Starter]:
    started: list[Foreign] = []

    def run(behaviour: str = "good", env: Mapping[str, str] | None = None, spec: bool = True,
            device: str = "hip:0", prefix: str = "DFLASH_DS4_") -> Foreign:
        port = free_port()
        policy = {f"{prefix}EXACT_VERIFY_TRACE": "1"}
        if spec:
            policy |= {f"{prefix}SPEC": "1", f"{prefix}SPEC_Q": "3", f"{prefix}SPEC_REFERENCE_EXACT": "1",
                       f"{prefix}DRAFT": "d.gguf"}
        full_env = child_env({**policy, "FOREIGN_BEHAVIOUR": behaviour, **(env or {})})
        err, out = tmp_path / f"f{port}.err", tmp_path / f"f{port}.out"
        with err.open("wb") as e, out.open("wb") as o:
            proc = subprocess.Popen(
                [sys.executable, str(FOREIGN), "t.gguf", "--host", "127.0.0.1", "--port", str(port),
                 "--target-device", device, "--ds4-fused-decode"],
                stdout=o, stderr=e, env=full_env, start_new_session=True,
            )
        foreign = Foreign(proc, port, err, out)
        started.append(foreign)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{foreign.url}/health", timeout=2).status_code == 200:
                    return foreign
            time.sleep(0.02)
        return foreign

    yield run
    for foreign in started:
        with contextlib.suppress(ProcessLookupError):
            foreign.proc.kill()
        foreign.proc.wait(timeout=10)


def summaries(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("[ds4-spec] gen=")]


def test_good_speaks_the_real_format(start: Starter) -> None:
    foreign = start()
    response = foreign.ask(12)
    assert response.status_code == 200 and response.headers["Connection"] == "close"
    lines = foreign.lines()
    (summary,) = summaries(lines)
    match = SUMMARY.match(summary)
    assert match and int(match.group("gen")) == 11  # n - 1
    assert int(match.group("matched")) < int(match.group("offered"))
    (trace,) = [m for m in map(TRACE.match, lines) if m]
    assert (trace.group("ref"), trace.group("spec"), trace.group("n")) == ("1", "1", "12")
    assert any(line.startswith("[ds4-spec] reference-exact verifier: ") for line in lines)
    foreign.proc.send_signal(signal.SIGTERM)
    assert foreign.proc.wait(timeout=10) == 0


def test_target_only_arm_and_sampler_fields(start: Starter) -> None:
    target = start(spec=False)
    target.ask(5)
    (trace,) = [m for m in map(TRACE.match, target.lines()) if m]
    assert (trace.group("ref"), trace.group("spec")) == ("0", "0") and summaries(target.lines()) == []
    spec = start()
    spec.ask(5, presence_penalty=0.5)
    (trace,) = [m for m in map(TRACE.match, spec.lines()) if m]
    assert (trace.group("ref"), trace.group("spec")) == ("1", "0") and summaries(spec.lines()) == []


def test_fused_decode_is_refused_off_hip(start: Starter) -> None:
    foreign = start(device="cuda:0")
    assert foreign.proc.wait(timeout=10) == 2
    assert foreign.err.read_text() == (
        "[server] --ds4-fused-decode and --ds4-expert-top-k currently require single-device HIP DeepSeek4\n"
    )


def test_upstream_lines_are_the_fixtures(start: Starter) -> None:
    rows = dict(line.split("\t", 1)[::-1] for line in UPSTREAM_LINES.read_text().splitlines() if "\t" in line)
    by_kind = {kind: text for text, kind in rows.items()}
    spec = start("upstream-lines")
    spec.ask(96)
    assert spec.lines() == [by_kind["PASS-TRACE"], by_kind["BANNER"], by_kind["PASS-SUMMARY"]]
    target = start("upstream-lines", spec=False)
    target.ask(96)
    assert target.lines() == ["[ds4-exact-verify-trace] reference_exact=0 speculation=0 n=3 ids=[8 13 21]"]


def test_behaviours(start: Starter) -> None:
    stdout = start("trace-stdout")
    stdout.ask()
    assert not any(TRACE.match(line) for line in stdout.lines())
    assert [line for line in stdout.out.read_text().splitlines() if TRACE.match(line)]

    luce = start("luce-only", prefix="LUCE_DS4_")
    luce.ask()
    assert len(summaries(luce.lines())) == 1
    ignored = start("luce-only")  # DFLASH_DS4_* names only: nothing is on
    ignored.ask()
    assert ignored.lines() == []

    no_counters = start("no-counters")
    no_counters.ask()
    (summary,) = summaries(no_counters.lines())
    assert "matched=" not in summary and "offered=" not in summary and " mean_accept=" in summary

    failing = start("failure-line")
    failing.ask()
    assert "[ds4-spec] verify failed" in failing.lines()

    no_draft = start("no-draft")
    no_draft.ask()
    lines = no_draft.lines()
    assert lines[0].startswith("[deepseek4] DSpark drafter load FAILED: ")
    assert summaries(lines) == [] and "speculation=0" in lines[-1]


def test_summary_after_response_comes_late(start: Starter) -> None:
    foreign = start("summary-after-response")
    assert foreign.ask().status_code == 200
    deadline = time.monotonic() + 10
    while len(foreign.lines()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(summaries(foreign.lines())) == 1


def test_slow_teardown_finishes_then_lingers(start: Starter) -> None:
    slow = start("slow-teardown")
    slow.ask()
    slow.proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        slow.proc.wait(timeout=1.0)
    quick = start("slow-teardown", env={"FOREIGN_TEARDOWN_S": "0"})
    quick.proc.send_signal(signal.SIGTERM)
    assert quick.proc.wait(timeout=10) == 0


def test_mismatch_and_crash(start: Starter) -> None:
    target, spec = start("mismatch", spec=False), start("mismatch")
    target.ask()
    spec.ask()
    ids = [[int(x) for x in m.group("ids").split()] for f in (target, spec) for m in map(TRACE.match, f.lines()) if m]
    assert [i for i, (a, b) in enumerate(zip(*ids, strict=True)) if a != b] == [5]
    crash = start("crash-on-request")
    with pytest.raises(requests.ConnectionError):
        crash.ask()
    assert crash.proc.wait(timeout=10) == 9
