"""One queue per runner: first come, first run, one at a time; a full queue refuses, never cancels."""

from __future__ import annotations

import threading

import pytest

from ds4ci.service.queue import Busy, RunnerQueue, Ticket


def test_requests_run_one_at_a_time_in_order_and_a_full_queue_is_busy() -> None:
    gate, order, running = threading.Event(), list[int](), list[int]()

    def work(ticket: Ticket) -> int:
        running.append(ticket.number)
        assert len(running) - len(order) == 1  # never two at once
        if ticket.number == 1:
            gate.wait(30)
        order.append(ticket.number)
        return ticket.number * 10

    queue = RunnerQueue("box", 2, work)
    tickets = [Ticket(n, None) for n in (1, 2, 3)]
    assert queue.submit(tickets[0]) == 1
    assert tickets[0].started.wait(30)
    assert queue.submit(tickets[1]) == 1 and queue.submit(tickets[2]) == 2
    with pytest.raises(Busy, match="2 requests already wait"):
        queue.submit(Ticket(4, None))
    assert queue.position(tickets[2]) == 2
    gate.set()
    for ticket in tickets:
        assert ticket.done.wait(30)
    assert order == [1, 2, 3] and [t.outcome for t in tickets] == [10, 20, 30]


def test_a_caller_that_hung_up_is_skipped_and_a_failure_does_not_stop_the_queue() -> None:
    hold = threading.Event()

    def work(ticket: Ticket) -> str:
        if ticket.number == 1:
            hold.wait(30)
        if ticket.number == 3:
            raise ValueError("boom")
        return "ran"

    queue = RunnerQueue("box", 5, work)
    tickets = [Ticket(n, None) for n in (1, 2, 3, 4)]
    for ticket in tickets:
        queue.submit(ticket)
    tickets[1].gone.set()
    hold.set()
    for ticket in tickets:
        assert ticket.done.wait(30)
    assert tickets[1].outcome is None and "hung up" in str(tickets[1].failure)
    assert tickets[2].failure == "ValueError: boom" and tickets[3].outcome == "ran"
    queue.close()
    with pytest.raises(Busy, match="stopping"):
        queue.submit(Ticket(5, None))


def test_closing_answers_the_waiting_and_lets_the_running_one_end() -> None:
    hold = threading.Event()
    queue = RunnerQueue("box", 5, lambda ticket: hold.wait(30))
    running, waiting = Ticket(1, None), Ticket(2, None)
    queue.submit(running)
    assert running.started.wait(30)
    queue.submit(waiting)
    queue.close()
    assert waiting.done.is_set() and "stopped before its turn" in str(waiting.failure)
    hold.set()
    queue.join(30)
    assert running.done.is_set() and running.outcome is True
