"""Fixtures shared by several test modules, the ``e2e`` and ``slow`` marks, and the xdist groups.

``tests/unit/`` mirrors the package (``tests/unit/judging/`` tests ``ds4ci/judging/``) and runs in
process; ``tests/e2e/`` starts real processes. ``pytest -m "not e2e"`` runs the unit tests alone.

``slow`` marks every test that starts real processes (tests/e2e/ and tests/faults/) and the in-process
tests marked by hand that take seconds; ``pytest -n 2 -m "not slow"`` is the edit loop's tier
(docs/testing.md). Under ``pytest -n 4`` (the README's command, ``--dist loadgroup``) the tests of a
module that uses a module-scoped fixture of this suite run on one worker, so that fixture (a sealed
bundle, a running server) is made once, not once per worker. A session-scoped fixture groups nothing:
``built_once`` makes its folder once per run (the ``wheelhouse``), and the workers share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegithub import FakeGitHub
from paths import ROOT
from runonce import built_once


@pytest.fixture()
def fake() -> Iterator[FakeGitHub]:
    """A fresh stateful fake GitHub API for acme/engine on loopback (test_publish has its own)."""
    server = FakeGitHub(owner="acme", repo="engine").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """For the act tests (tests/actkit.py): wheels of ds4ci's dependencies and build backend (pip needs no network),
    built once per run and shared by the workers (``built_once``)."""
    from ds4ci.errors import NoVerdictError
    from ds4ci.rehearse.source import build_wheelhouse

    def build(out: Path) -> str | None:
        try:  # what `ds4ci rehearse` builds: the dependencies' wheels and the publishing job's locked files, no ds4ci
            build_wheelhouse(ROOT, out)
        except NoVerdictError as exc:
            return str(exc)
        return None

    return built_once(tmp_path_factory, "wheelhouse", build)


TESTS_DIR = Path(__file__).resolve().parent
E2E_DIR = TESTS_DIR / "e2e"
PROCESS_DIRS = (E2E_DIR, TESTS_DIR / "faults")  # tests that start real processes: all of them are slow
# In-process tests that take a second or more (docs/testing.md has the measurement): property-based fuzzing,
# the tiny models' writer and the reference server's double (PyTorch), and the import-graph scans.
SLOW_IN_PROCESS = (
    "tests/unit/evidence/test_results_fuzz.py::",
    "tests/unit/judging/test_tinywords.py::",
    "tests/unit/judging/test_protocol.py::test_extra_fields_and_tail_text_never_break_a_valid_line",
    "tests/unit/judging/test_protocol.py::test_a_missing_or_duplicated_required_field_always_fails",
    "tests/unit/judging/test_protocol.py::test_fuzz_classify_never_crashes_and_never_skips_a_trusted_line",
    "tests/unit/refserver/",
    "tests/unit/tinymodels/",
    "tests/unit/test_layers.py::",
    "tests/unit/runner/test_identity.py::test_digests_match_hashlib_in_input_order",
)



def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The group of an item that uses a module-scoped fixture defined in this suite: its module.

    A session-scoped fixture puts no test in a group: each worker has a session of its own, so keeping a
    module's tests on one worker would not make it fewer times, and it would run them one after another.
    (Such fixtures, ``wheelhouse`` and test_calibrate's ``models``, are made once per run by ``built_once``.)"""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for defs in info.name2fixturedefs.values():
        fixture = defs[-1]
        source = getattr(fixture.func, "__code__", None)
        if fixture.scope in ("function", "session") or source is None:
            continue
        if TESTS_DIR in Path(source.co_filename).resolve().parents:
            return item.nodeid.split("::", 1)[0]
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parents = Path(str(item.fspath)).resolve().parents
        if E2E_DIR in parents:
            item.add_marker(pytest.mark.e2e)
        if any(d in parents for d in PROCESS_DIRS) or item.nodeid.startswith(SLOW_IN_PROCESS):
            item.add_marker(pytest.mark.slow)
        group = _shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
