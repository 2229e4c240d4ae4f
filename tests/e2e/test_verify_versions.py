"""Evidence outlives the ds4ci that sealed it: the compatibility suite (docs/results.md, "Schema versions").

Every bundle and results.json captured from a real or recorded ds4ci (tests/data, copied from
../shared/fixtures) verifies with today's code (never as tampered) and renders with ``ds4ci report``;
tampering with any of them still exits 3. A bundle sealed with today's code and rewritten the way a
future (or an older) ds4ci would write it gets the messages a maintainer needs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gatekit import DS4CI, Workspace
from paths import TESTS

from ds4ci.errors import EXIT_ERROR
from ds4ci.evidence import convert
from ds4ci.evidence.verify import EXIT_UNREADABLE_SCHEMA, verify_dir, verify_path
from ds4ci.report import render
from ds4ci.report.docview import load

DATA = TESTS / "data"
BUNDLES = sorted(DATA.rglob("*.bundle.tar.gz"))
RESULTS = sorted(DATA.rglob("*results*.json"))


def _name(path: Path) -> str:
    return str(path.relative_to(DATA))


def test_the_suite_holds_every_capture() -> None:
    # the captures of 2026-12-01..04 (tests/data/real-server, copied from ../shared/fixtures) and the selftests
    assert len(BUNDLES) >= 23 and len(RESULTS) >= 30
    versions = {convert.sealed_version(json.loads(p.read_text()), _name(p)) for p in RESULTS}
    assert versions >= {1, 2}  # both shapes before the number existed are in the suite


@pytest.mark.parametrize("bundle", BUNDLES, ids=_name)
def test_every_captured_bundle_verifies_and_none_as_tampered(bundle: Path) -> None:
    found = verify_path(bundle, None)
    assert found.problems == [] and found.unreadable is None, found.summary()
    assert found.exit_code in (0, 1, 4), found.summary()
    if found.sealed_schema == convert.CURRENT:  # sealed with today's schema: compared field by field, no note
        assert found.notes == [] and found.derived is not None, found.summary()
    else:
        assert found.notes and "re-derived by ds4ci" in found.notes[0] and "(schema 3)" in found.notes[0]


@pytest.mark.parametrize("path", RESULTS, ids=_name)
def test_every_captured_results_file_renders(path: Path) -> None:
    doc = load.load_one(path)
    assert doc["schema_version"] == convert.CURRENT
    body, sections = render.render([doc])
    assert sections and doc["runner"]["name"] in body


def _extracted(bundle: Path, into: Path) -> Path:
    with tarfile.open(bundle) as tar:
        tar.extractall(into, filter="data")
    (root,) = [p for p in into.iterdir() if p.is_dir()]
    return root


@pytest.mark.parametrize("bundle", BUNDLES, ids=_name)
def test_tampering_with_any_captured_bundle_still_exits_3(bundle: Path, tmp_path: Path) -> None:
    root = _extracted(bundle, tmp_path / "sealed")
    edited = root / json.loads((root / "manifest.json").read_text())["evidence"][0]["path"]
    edited.write_bytes(edited.read_bytes() + b" ")
    found = verify_dir(root)
    assert found.exit_code == EXIT_ERROR and "does not match the manifest" in found.summary(), found.summary()
    edited.write_bytes(edited.read_bytes()[:-1])
    doc = json.loads((root / "results.json").read_text())
    doc["settings"]["seed"] += 1  # a field copied from a sealed file: never a finding of changed rules
    (root / "results.json").write_text(json.dumps(doc))
    found = verify_dir(root)
    assert found.exit_code == EXIT_ERROR and "settings.seed" in found.summary(), found.summary()


# -- a bundle sealed with today's code, rewritten as another ds4ci would have written it -------------------------


@pytest.fixture(scope="module")
def today(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("today")
    run = Workspace.create(root).gate(widths="2")
    assert run.code == 0 and run.results is not None, run.stderr
    assert run.results["schema_version"] == convert.CURRENT
    return Path(run.results["evidence"]["dir"])


def verify(bundle: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, "verify", str(bundle)], capture_output=True, text=True, timeout=120, check=False)


def rewritten(today: Path, tmp_path: Path, results: Callable[[dict[str, Any]], None],
              manifest: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of today's bundle whose manifest and results.json are rewritten, the digest kept consistent."""
    bundle = Path(shutil.copytree(today, tmp_path / "bundle"))
    doc = json.loads((bundle / "manifest.json").read_text())
    manifest(doc)
    (bundle / "manifest.json").write_text(json.dumps(doc))
    digest = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    doc = json.loads((bundle / "results.json").read_text())
    results(doc)
    doc["evidence"]["manifest_sha256"] = digest
    (bundle / "results.json").write_text(json.dumps(doc))
    return bundle


def _future(doc: dict[str, Any]) -> None:
    doc.update(schema_version=4, ds4ci_version="0.3.0")
    for width in doc["widths"]:
        for prompt in width["prompts"]:
            prompt["accepted_drafts"] = prompt.pop("matched")  # a field renamed, as a later version might


def _as_schema_2(doc: dict[str, Any]) -> None:
    del doc["schema_version"]
    for width in doc["widths"]:
        for prompt in width["prompts"]:
            del prompt["matched_min"], prompt["matched_max"]


def _unversioned(doc: dict[str, Any]) -> None:
    del doc["schema_version"]


def test_a_future_schema_exits_5_naming_the_pip_install_and_its_tampering_3(today: Path, tmp_path: Path) -> None:
    bundle = rewritten(today, tmp_path, _future, lambda m: m.update(schema_version=4))
    proc = verify(bundle)
    assert proc.returncode == EXIT_UNREADABLE_SCHEMA, proc.stdout + proc.stderr
    assert "its files match the manifest, but this ds4ci cannot re-derive it" in proc.stdout
    assert "has schema 4, newer than this ds4ci reads (schemas 1..3)" in proc.stdout
    assert "sealed by ds4ci 0.3.0: verify it with `pip install 'ds4ci @ git+https://github.com/OWNER/ds4ci@v0.3.0'`" \
        in proc.stdout
    report = subprocess.run([DS4CI, "report", str(bundle / "results.json")], capture_output=True, text=True,
                            timeout=120, check=False)
    assert report.returncode == 2 and "git+https://github.com/OWNER/ds4ci@v0.3.0" in report.stderr, report.stderr
    log = bundle / "servers" / "q2" / "stderr.log"
    log.write_bytes(log.read_bytes() + b"forged\n")
    tampered = verify(bundle)
    assert tampered.returncode == EXIT_ERROR and "does not match the manifest" in tampered.stdout, tampered.stdout


def test_an_older_schema_is_re_derived_and_a_changed_verdict_is_a_finding(today: Path, tmp_path: Path) -> None:
    bundle = rewritten(today, tmp_path, _as_schema_2, _unversioned)
    proc = verify(bundle)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sealed by ds4ci 0.1.0 (schema 2); re-derived by ds4ci 0.1.0 (schema 3): the verdicts agree" in proc.stdout
    doc = json.loads((bundle / "results.json").read_text())
    doc["widths"][0]["verdict"] = "fail"  # judged: today's rules decide, and the difference is named
    (bundle / "results.json").write_text(json.dumps(doc))
    proc = verify(bundle)
    assert proc.returncode == 0, proc.stdout
    assert "the verdicts differ, first at widths[0].verdict recorded fail, derived pass" in proc.stdout


def test_one_bundle_has_one_schema(today: Path, tmp_path: Path) -> None:
    # results.json made to look older while the sealed manifest says 3: the lenient reading is refused
    bundle = rewritten(today, tmp_path, _as_schema_2, lambda m: None)
    proc = verify(bundle)
    assert proc.returncode == EXIT_ERROR, proc.stdout
    assert "manifest.json records schema_version 3 but results.json has schema 2" in proc.stdout
