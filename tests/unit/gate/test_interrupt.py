"""A SIGTERM while a gate creates its attempt, or one a helper swallowed, still stops the run through its cleanup."""

from __future__ import annotations

import contextlib
import signal

import pytest

from ds4ci.gate.interrupt import GateInterrupted, signals_raise


def test_a_signal_before_checky_is_kept_and_raised_where_the_caller_checks() -> None:
    steps = []
    with signals_raise(held=True) as check:
        signal.raise_signal(signal.SIGTERM)
        steps.append("the attempt was created")  # the signal did not interrupt this
        with pytest.raises(GateInterrupted, match="interrupted by SIGTERM"):
            check()
    assert steps == ["the attempt was created"]


def test_after_checky_a_signal_raises_at_once() -> None:
    with signals_raise(held=True) as check:
        check()
        with pytest.raises(GateInterrupted, match="SIGINT"):
            signal.raise_signal(signal.SIGINT)


def test_a_kept_signal_never_checked_raises_on_the_way_out() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(GateInterrupted, match="SIGTERM"), signals_raise(held=True):
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before  # the handler of before the gate is back


def test_without_held_a_signal_raises_at_once() -> None:
    with signals_raise(), pytest.raises(GateInterrupted, match="SIGTERM"):
        signal.raise_signal(signal.SIGTERM)


def test_a_signal_whose_exception_a_helper_swallowed_is_raised_at_the_next_check() -> None:
    from ds4ci.errors import NoVerdictError

    with signals_raise() as check:
        with contextlib.suppress(NoVerdictError):  # a helper that reads "no verdict" as "no answer" (a work tree?)
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(GateInterrupted, match="interrupted by SIGTERM"):
            check()


def test_check_without_a_signal_lets_the_run_go_on() -> None:
    with signals_raise(held=True) as check:
        check()
        check()
