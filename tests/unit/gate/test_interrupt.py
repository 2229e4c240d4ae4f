"""A SIGTERM while a gate creates its attempt is kept and raised inside the run's cleanup, never lost."""

from __future__ import annotations

import signal

import pytest

from ds4ci.gate.interrupt import GateInterrupted, signals_raise


def test_a_signal_before_delivery_is_kept_and_raised_where_the_caller_delivers() -> None:
    steps = []
    with signals_raise(held=True) as deliver:
        signal.raise_signal(signal.SIGTERM)
        steps.append("the attempt was created")  # the signal did not interrupt this
        with pytest.raises(GateInterrupted, match="interrupted by SIGTERM"):
            deliver()
    assert steps == ["the attempt was created"]


def test_after_delivery_a_signal_raises_at_once() -> None:
    with signals_raise(held=True) as deliver:
        deliver()
        with pytest.raises(GateInterrupted, match="SIGINT"):
            signal.raise_signal(signal.SIGINT)


def test_a_kept_signal_never_delivered_raises_on_the_way_out() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(GateInterrupted, match="SIGTERM"), signals_raise(held=True):
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before  # the handler of before the gate is back


def test_without_held_a_signal_raises_at_once() -> None:
    with signals_raise(), pytest.raises(GateInterrupted, match="SIGTERM"):
        signal.raise_signal(signal.SIGTERM)
