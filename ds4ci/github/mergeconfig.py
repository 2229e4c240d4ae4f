"""What a merge needs, read from the `[merge]` table of a ds4ci.toml and the command line: runners whose gate
must be green, checks (with the app or account each must come from), approvals and the publisher."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.github.merge import DEFAULT_APPROVALS, DEFAULT_CHECK_APP, DEFAULT_PUBLISHER, RUNNER_RE, CheckSource, Requirements
from ds4ci.options import table as options
from ds4ci.options.config import read_section
from ds4ci.options.sections import unknown


def _names(value: Any, where: str, pattern: re.Pattern[str] | None) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: expected a list of names, found {value!r}")
    names = tuple(v.strip() for v in value)
    for name in names:
        if not name or (pattern is not None and not pattern.match(name)):
            what = "letters, digits, '.', '_' or '-'" if pattern is not None else "a non-empty name"
            raise UsageError(f"{where}: expected {what}, found {name!r}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"{where}: {', '.join(dupes)} listed twice")
    return names


def _approvals(value: Any, where: str) -> int:
    check = options.get("merge", "approvals").check
    assert check is not None
    found: int = check(value, where)
    return found


def load_merge_table(path: Path) -> dict[str, Any]:
    """The ``[merge]`` table of a ds4ci.toml ({} when absent); other tables are not looked at."""
    return read_section(path, "merge")


def _check_sources(value: Any) -> tuple[tuple[str, ...], tuple[CheckSource, ...]]:
    """``merge.checks``: names, or ``[[merge.checks]]`` tables saying which app and account may satisfy each."""
    if not isinstance(value, list):
        raise UsageError(f"merge.checks: expected a list of names or tables, found {value!r}")
    names, sources = [], []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            names.append(item)
            continue
        where = f"merge.checks[{i}]"
        unknown(item, options.keys("merge.checks"), where)
        found = {o.key: o.check(item[o.key], f"{where}.{o.key}") for o in options.in_section("merge.checks")
                 if o.key in item and o.check is not None}
        if "name" not in found:
            raise UsageError(f"{where}.name: expected the check run's name or the status context")
        names.append(found["name"])
        sources.append(CheckSource(found["name"], found.get("app", DEFAULT_CHECK_APP), found.get("creator")))
    return _names(names, "merge.checks", None), tuple(sources)


_APP_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")


def _cli_checks(given: Sequence[str]) -> tuple[tuple[str, ...], tuple[CheckSource, ...]]:
    """``--check NAME`` (a check run of the default app, or a status by the publisher) or ``--check NAME@APP``:
    the check run NAME counts only from the GitHub App whose app.slug is APP, as a [[merge.checks]] table says."""
    names, sources = [], []
    for item in given:
        name, at, app = item.strip().rpartition("@") if "@" in item else (item, "", "")
        if at and not _APP_SLUG.match(app):
            raise UsageError(f"--check {item!r}: expected NAME@APP with APP a GitHub App's slug (lowercase letters, "
                             f"digits and '-', e.g. cubic-dev-ai), found {app!r}")
        names.append(name.strip())
        if at:
            sources.append(CheckSource(name.strip(), app))
    return _names(names, "--check", None), tuple(sources)


def requirements(
    config: Path | None, runners: Sequence[str] | None, checks: Sequence[str] | None, approvals: int | None,
    publisher: str | None = None, workflow: str | None = None,
) -> Requirements:
    """CLI values win over ``[merge]`` (a list given on the command line replaces the file's)."""
    table = load_merge_table(config) if config is not None else {}
    if runners:
        run = _names(list(runners), "--runner", RUNNER_RE)
    else:
        run = _names(table.get("runners", []), "merge.runners", RUNNER_RE)
    sources: tuple[CheckSource, ...] = ()
    if checks:
        chk, sources = _cli_checks(checks)
    else:
        chk, sources = _check_sources(table.get("checks", []))
    if approvals is not None:
        need = _approvals(approvals, "--approvals")
    else:
        need = _approvals(table.get("approvals", DEFAULT_APPROVALS), "merge.approvals")
    if not run:
        raise UsageError("name at least one gate runner: --runner NAME (or merge.runners in the config file)")
    who = options.get("merge", "publisher")
    assert who.check is not None
    login = who.check(publisher, "--publisher") if publisher is not None else who.check(
        table.get("publisher", DEFAULT_PUBLISHER), "merge.publisher")
    trust = trusted_gate(table, login, workflow)
    age = options.get("merge", "calibration_max_age_days")
    assert age.check is not None
    days = age.check(table.get("calibration_max_age_days", age.default), "merge.calibration_max_age_days")
    return Requirements(run, chk, need, login, sources, trust.workflow, calibration_max_age_days=days,
                        vouch=trust.vouch, vouch_app_id=trust.vouch_app_id)


def trusted_gate(table: dict[str, Any], publisher: str, workflow: str | None = None) -> Requirements:
    """What vouches for a green gate: ``merge.workflow`` (``--trusted-workflow`` wins), ``merge.vouch`` and, for
    "publisher", the GitHub App's id (required: no app, no vouch). The runners are not read here."""
    flow, kind, app = options.get("merge", "workflow"), options.get("merge", "vouch"), options.get("merge", "vouch_app_id")
    assert flow.check is not None and kind.check is not None and app.check is not None
    path = flow.check(workflow, "--trusted-workflow") if workflow is not None else flow.check(
        table.get("workflow", flow.default), "merge.workflow")
    how = kind.check(table.get("vouch", kind.default), "merge.vouch")
    app_id = app.check(table["vouch_app_id"], "merge.vouch_app_id") if "vouch_app_id" in table else None
    if how == "publisher" and app_id is None:
        raise UsageError('merge.vouch_app_id: vouch = "publisher" needs the id of the GitHub App whose check runs '
                         "vouch (its app.id, an integer), found none")
    return Requirements((), publisher=publisher, workflow=path, vouch=how, vouch_app_id=app_id)
