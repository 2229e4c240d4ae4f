"""Commit statuses with their creators: only the publisher's ``ds4ci/<runner>`` statuses count.

GitHub's combined status (``GET /commits/{ref}/status``) keeps the latest status per context from
*anyone* with write access, and does not say who posted it. ``GET /commits/{ref}/statuses`` lists
every status, newest first, each with ``creator.login``: from it we take, per context, the newest
status of the account that counts, and list the newest of every other account as ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ds4ci.errors import PublishError
from ds4ci.options.table import DEFAULT_PUBLISHER


@dataclass(frozen=True)
class Status:
    """One commit status: its context, state, description and who posted it (``creator.login``)."""

    context: str
    state: str  # error | failure | pending | success
    description: str = ""
    creator: str = DEFAULT_PUBLISHER
    target_url: str = ""  # the run it links to: a gate status counts only from a run of the trusted gate


def _field(item: Any, key: str, what: str, *, nullable: bool = False) -> str:
    value = item.get(key) if isinstance(item, dict) else None
    if value is None and nullable:
        return ""
    if not isinstance(value, str):
        raise PublishError(f"GitHub's answer for {what} ({key}): expected a string, found {value!r:.200}")
    return value


def parse(items: Sequence[Any], sha: str) -> tuple[Status, ...]:
    """Every status of ``sha`` as GitHub lists them (newest first), each with its creator."""
    what = f"the statuses of {sha[:12]}"
    out = []
    for item in items:
        creator = item.get("creator") if isinstance(item, dict) else None
        login = _field(creator, "login", f"{what} (creator)") if creator is not None else "ghost"  # deleted account
        out.append(Status(_field(item, "context", what), _field(item, "state", what),
                          _field(item, "description", what, nullable=True), login,
                          _field(item, "target_url", what, nullable=True)))
    return tuple(out)


def newest(found: Iterable[Status]) -> list[Status]:
    """The newest status per (context, creator), in the order given (newest first)."""
    seen: dict[tuple[str, str], Status] = {}
    for status in found:
        seen.setdefault((status.context, status.creator), status)
    return list(seen.values())


def from_creator(found: Iterable[Status], creator: str) -> dict[str, Status]:
    """context -> the newest status that ``creator`` posted."""
    return {s.context: s for s in newest(found) if s.creator == creator}


def ignored(found: Iterable[Status], context: str, creator: str) -> list[Status]:
    """The newest status of ``context`` from every account other than ``creator``."""
    return [s for s in newest(found) if s.context == context and s.creator != creator]


def describe_ignored(found: Sequence[Status]) -> str:
    """``ignored: success by mallory, failure by eve`` (empty when there are none)."""
    if not found:
        return ""
    return "ignored (not posted by the publisher): " + ", ".join(f"{s.state} by {s.creator}" for s in found)
