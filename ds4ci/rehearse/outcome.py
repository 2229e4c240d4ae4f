"""What a rehearsed pull request would show, read back from the fake GitHub, and the rehearsal's exit code.

Per event: act's exit, each ``ds4ci/<runner>`` commit status (the latest per context), the check runs and
the sticky comment. Fail closed: an event without any ``ds4ci/`` status is no verdict, never a pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS
from ds4ci.rehearse.fakegithub import FakeGitHub

_STEP_MARKS = ("❌", "::error", "Failure -")


@dataclass(frozen=True)
class Status:
    context: str
    state: str
    description: str


@dataclass(frozen=True)
class CheckRun:
    name: str
    status: str
    conclusion: str | None
    title: str | None


@dataclass(frozen=True)
class EventOutcome:
    """One event's rehearsal. ``act_exit`` None: act did not finish (``problem`` says why)."""

    event: str
    act_exit: int | None
    statuses: tuple[Status, ...]
    check_runs: tuple[CheckRun, ...]
    comment: str | None
    failing_steps: tuple[str, ...]
    log: str
    problem: str = ""

    @property
    def code(self) -> int:
        """0: every ds4ci/ status success; 1: a failure and no error or pending; 3: no status, an error, a pending,
        or act did not finish."""
        states = {s.state for s in self.statuses if s.context.startswith("ds4ci/")}
        if self.act_exit is None or not states or states & {"error", "pending"}:
            return EXIT_ERROR
        return EXIT_FAIL if "failure" in states else EXIT_PASS


def failing_steps(log: str, keep: int = 40) -> tuple[str, ...]:
    """The lines of an act log that say a step failed, the last ``keep`` of them."""
    return tuple(line for line in log.splitlines() if any(m in line for m in _STEP_MARKS))[-keep:]


def read_back(fake: FakeGitHub, event: str, pr: int, head: str, act_exit: int | None, log: str,
              problem: str = "") -> EventOutcome:
    """What the pull request ``pr`` shows for ``head`` after the run: statuses, check runs, the last comment."""
    latest: dict[str, Status] = {}
    for s in fake.statuses(head):
        latest[s["context"]] = Status(s["context"], s["state"], s["description"] or "")
    runs = tuple(CheckRun(r["name"], r["status"], r["conclusion"], (r.get("output") or {}).get("title"))
                 for r in fake.check_runs(head))
    comments = sorted(fake.comments(pr), key=lambda c: c["updated_at"])
    comment = comments[-1]["body"] if comments else None
    return EventOutcome(event, act_exit, tuple(latest.values()), runs, comment, failing_steps(log), log, problem)


def exit_code(outcomes: list[EventOutcome]) -> int:
    """The most severe of the events' codes, in the order 3, 1, 0; no event is no verdict."""
    codes = {o.code for o in outcomes}
    return next((c for c in (EXIT_ERROR, EXIT_FAIL) if c in codes), EXIT_PASS if codes else EXIT_ERROR)


def render(outcomes: list[EventOutcome], comments: bool = True) -> str:
    """The rehearsal as text: per event, act's exit and what the pull request shows."""
    out: list[str] = []
    for o in outcomes:
        act = "did not finish" if o.act_exit is None else f"exit {o.act_exit}"
        out.append(f"== {o.event}: act {act}" + (f" ({o.problem})" if o.problem else ""))
        if not o.statuses:
            out.append("statuses: none (no verdict: the workflows set no ds4ci/ status)")
        out.extend(f"status {s.context}: {s.state}: {s.description}" for s in o.statuses)
        out.extend(f"check run {r.name}: {r.conclusion or r.status}" + (f": {r.title}" if r.title else "")
                   for r in o.check_runs)
        if o.failing_steps and o.code != EXIT_PASS:
            out.append("failing steps:")
            out.extend(f"  {line.strip()}" for line in o.failing_steps[-12:])
        if o.comment is None:
            out.append("comment: none")
        elif comments:
            out.extend(["comment:", *(f"  | {line}" for line in o.comment.splitlines())])
        verdict = {EXIT_PASS: "green", EXIT_FAIL: "red"}.get(o.code, "no verdict")
        out.extend([f"pull request: {verdict}", ""])
    return "\n".join(out)


def as_json(outcomes: list[EventOutcome]) -> dict[str, Any]:
    """The rehearsal for scripts: the exit code and, per event, what the pull request shows (no act log)."""
    return {"exit_code": exit_code(outcomes),
            "events": [{**{k: v for k, v in asdict(o).items() if k != "log"}, "code": o.code} for o in outcomes]}
