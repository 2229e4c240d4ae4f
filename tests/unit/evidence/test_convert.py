"""ds4ci.evidence.convert: every schema version read into today's shape, or refused saying what to install."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from paths import TESTS

from ds4ci.errors import ResultsError
from ds4ci.evidence import convert, results

TODAY: dict[str, Any] = json.loads((TESTS / "data" / "results" / "pass.json").read_text())
SCHEMA_1 = TESTS / "data" / "real-server" / "h200-fork-41ee7d0-mutants" / "no-rollback-96.results.json"


def _as_schema_1() -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(TODAY)
    del doc["schema_version"]
    for width in doc["widths"]:
        for cell in width["prompts"]:
            cell["banner"], cell["full_snap"] = cell.pop("banner_claimed"), cell.pop("full_snap_claimed")
            del cell["rejected_drafts"], cell["matched_min"], cell["matched_max"]
    return doc


def test_a_schema_1_document_becomes_todays_with_rejected_drafts_computed() -> None:
    old = _as_schema_1()
    assert convert.sealed_version(old, "old") == 1
    assert convert.to_current(old, "old") == TODAY
    assert "banner" in old["widths"][0]["prompts"][0]  # the document read is never changed


def test_the_real_schema_1_capture_is_read_with_its_boundaries_renamed() -> None:
    doc = results.load(SCHEMA_1)
    bounds = doc["widths"][0]["coverage"]
    assert bounds is not None and bounds["boundaries"] is not None
    assert bounds["boundaries"]["ratio128"]["rejected_at_boundary"] == 2
    cell = doc["widths"][0]["prompts"][0]
    assert (cell["matched"], cell["matched_min"], cell["matched_max"], cell["rejected_drafts"]) == (38, 38, 38, 19)


def test_todays_document_is_read_as_it_is() -> None:
    assert convert.sealed_version(TODAY, "x") == convert.CURRENT and convert.to_current(TODAY, "x") is TODAY


def test_a_document_with_both_shapes_is_refused() -> None:
    doc = _as_schema_1()
    doc["widths"][1]["prompts"][0]["banner_claimed"] = True
    with pytest.raises(ResultsError, match=r"found both schema 1's .* and schema 2's"):
        convert.sealed_version(doc, "mixed")


@pytest.mark.parametrize("value", [True, 0, -1, "3", 3.0])
def test_a_schema_version_that_is_not_a_positive_integer_is_refused(value: object) -> None:
    with pytest.raises(ResultsError, match="expected schema_version to be a positive integer"):
        convert.sealed_version({**TODAY, "schema_version": value}, "bad")


def test_a_newer_schema_names_the_ds4ci_to_install() -> None:
    with pytest.raises(convert.UnreadableSchema) as caught:
        convert.to_current({**TODAY, "schema_version": 4, "ds4ci_version": "0.3.0"}, "future")
    assert caught.value.version == 4 and caught.value.sealed_by == "0.3.0"
    assert str(caught.value) == ("future has schema 4, newer than this ds4ci reads (schemas 1..3); it was sealed by "
                                 "ds4ci 0.3.0: verify it with `pip install 'ds4ci @ git+https://github.com/OWNER/ds4ci@v0.3.0'` "
                                 "(OWNER/ds4ci: ds4ci's repository, docs/install.md)")


def test_a_version_string_that_is_not_plain_is_never_put_into_a_command() -> None:
    with pytest.raises(convert.UnreadableSchema) as caught:
        convert.to_current({**TODAY, "schema_version": 9, "ds4ci_version": "1.0; rm -rf /"}, "future")
    assert "pip install" not in str(caught.value) and "its version is not recorded" in str(caught.value)


def test_the_install_line_installs_the_release_tag_the_way_install_md_does() -> None:
    """No package index holds ds4ci: the line names the tag vVERSION of its repository, as docs/install.md's does,
    and is one requirement pip reads (a name and a git URL), one shell word."""
    import shlex

    from packaging.requirements import Requirement

    line = convert.INSTALL_FROM_TAG.format(version="0.3.0")
    argv = shlex.split(line)
    assert argv[:2] == ["pip", "install"] and len(argv) == 3
    wanted = Requirement(argv[2])
    assert (wanted.name, wanted.url, str(wanted.specifier)) == ("ds4ci", "git+https://github.com/OWNER/ds4ci@v0.3.0", "")
    install_md = (TESTS.parent / "docs" / "install.md").read_text(encoding="utf-8")
    assert convert.INSTALL_FROM_TAG.format(version="0.1.0") in install_md
