"""The arms' placement and running them side by side (``ds4ci.gate.parallel``), with plain Python arms."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from ds4ci.errors import NoVerdictError
from ds4ci.gate import parallel
from ds4ci.gate.interrupt import GateInterrupted, signals_raise
from ds4ci.judging.tinywords import KNOWN_TARGETS

TINY = next(iter(KNOWN_TARGETS))
REAL = "ab" * 32


def test_slots_spread_the_arms_device_by_device() -> None:
    assert parallel.slots(["cuda:0", "cuda:1"], 2) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert parallel.slots(["hip:0"], 3) == ["hip:0"] * 3
    assert parallel.concurrent(["cuda:0"], 1, 4) == 1
    assert parallel.concurrent(["cuda:0", "cuda:1", "cuda:2", "cuda:3"], 1, 4) == 4
    assert parallel.concurrent(["cuda:0"], 4, 2) == 2


def test_several_arms_share_a_device_only_for_a_tiny_model() -> None:
    parallel.check_sharing(["cuda:0"], 4, 4, TINY)
    parallel.check_sharing(["cuda:0", "cuda:1", "cuda:2", "cuda:3"], 2, 4, REAL)  # one arm per device anyway
    parallel.check_sharing(["cuda:0"], 1, 4, REAL)
    with pytest.raises(NoVerdictError, match=r"would put 4 arms on one device.*not one of ds4ci's tiny models"):
        parallel.check_sharing(["cuda:0"], 4, 4, REAL)
    with pytest.raises(NoVerdictError, match="would put 2 arms on one device"):
        parallel.check_sharing(["cuda:0", "cuda:1"], 2, 4, None)


def test_every_arm_runs_at_once_and_one_failure_stops_no_other() -> None:
    started: list[tuple[str, str]] = []
    ended: list[str] = []
    everyone = threading.Barrier(4, timeout=10)  # passes only if all four arms run at the same time

    def run_one(arm: str, device: str) -> None:
        started.append((arm, device))
        everyone.wait()
        if arm == "q3":
            raise RuntimeError("q3 broke")
        time.sleep(0.05)
        ended.append(arm)

    with pytest.raises(RuntimeError, match="q3 broke"):  # raised once every other arm ended
        parallel.run_all(["target-only", "q2", "q3", "q4"], ["d0", "d1", "d2", "d3"], run_one, lambda: None,
                         parallel.Interrupts())
    assert sorted(started) == [("q2", "d1"), ("q3", "d2"), ("q4", "d3"), ("target-only", "d0")]
    assert sorted(ended) == ["q2", "q4", "target-only"]


def test_fewer_slots_than_arms_take_the_next_arm_each_arm_once() -> None:
    seen: dict[str, str] = {}
    first_two = threading.Barrier(2, timeout=10)  # the first two arms hold both slots at once

    def run_one(arm: str, device: str) -> None:
        assert arm not in seen
        seen[arm] = device
        if arm in ("a", "b"):
            first_two.wait()

    parallel.run_all(["a", "b", "c", "d", "e"], ["x", "y"], run_one, lambda: None, parallel.Interrupts())
    assert sorted(seen) == ["a", "b", "c", "d", "e"]
    assert {seen["a"], seen["b"]} == {"x", "y"} and set(seen.values()) == {"x", "y"}


def test_an_interrupt_stops_the_live_arms_starts_no_other_and_is_raised_after_all_ended() -> None:
    interrupts = parallel.Interrupts()
    release = threading.Event()
    ran: list[str] = []
    calls: list[float] = []

    def run_one(arm: str, _device: str) -> None:
        interrupts.check()
        ran.append(arm)
        if not release.wait(10):
            raise AssertionError("the interrupt never stopped this arm")
        interrupts.check()  # an arm ends on the interrupt, as a server's next request would

    def stop_live() -> None:
        calls.append(time.monotonic())
        release.set()

    threading.Timer(0.3, lambda: signal.raise_signal(signal.SIGTERM)).start()
    with signals_raise(), pytest.raises(GateInterrupted, match="SIGTERM"):
        parallel.run_all(["t", "q2", "q3"], ["d0", "d1"], run_one, stop_live, interrupts)
    assert sorted(ran) == ["q2", "t"]  # q3 waited for a slot and never started
    assert calls and interrupts.event.is_set()
    with pytest.raises(GateInterrupted):
        interrupts.check()
