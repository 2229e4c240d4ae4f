"""A server that prints no DS4 line at all is called that, and no real server's log is.

Every sealed bundle of the real dflash_server under tests/data/real-server (public 62880e2, whose speculative
arms aborted and whose target-only arm prints only the engine's own [deepseek4] lines; the fork's 41ee7d0 and
its successors, mutants and designs) speaks the protocol. The same bundle with every DS4-tagged line taken out
of its logs is what a server that does not speak it leaves: one error, and no parity ratio in any width.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from paths import TESTS

from ds4ci.evidence.derive import derive
from ds4ci.judging import judge, modeless
from ds4ci.judging.protocol import DS4_TAGS

REAL = TESTS / "data" / "real-server"
BUNDLES = sorted(REAL.rglob("*.bundle.tar.gz"))


def _attempt(bundle: Path, tmp_path: Path) -> Path:
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path, filter="data")
    (attempt,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return attempt


def _arms(attempt: Path) -> list[str]:
    return sorted(p.name for p in (attempt / "servers").iterdir() if p.is_dir())


def _strip_ds4_lines(attempt: Path) -> None:
    """Every arm's logs without their DS4-tagged lines: what a server that does not speak the protocol leaves."""
    for arm in _arms(attempt):
        for stream in ("stderr.log", "stdout.log"):
            log = attempt / "servers" / arm / stream
            log.write_bytes(b"".join(line for line in log.read_bytes().splitlines(keepends=True)
                                     if not line.startswith(DS4_TAGS)))


def test_there_are_real_bundles_to_read() -> None:
    assert len(BUNDLES) >= 10 and REAL / "h200-62880e2" / "public.bundle.tar.gz" in BUNDLES


@pytest.mark.parametrize("bundle", BUNDLES, ids=[str(b.relative_to(REAL)) for b in BUNDLES])
def test_no_real_servers_log_is_called_silent(bundle: Path, tmp_path: Path) -> None:
    attempt = _attempt(bundle, tmp_path)
    assert modeless.speaks_protocol(attempt, _arms(attempt))
    assert modeless.SILENT not in derive(attempt)["reasons"]


def test_the_engines_own_lines_alone_are_not_silence(tmp_path: Path) -> None:
    """62880e2's target-only arm printed no [ds4-spec] line, only [deepseek4] ones: with every speculative arm's
    log emptied, it is a DS4 engine without the mode (the modeless reason), never a silent server."""
    attempt = _attempt(REAL / "h200-62880e2" / "public.bundle.tar.gz", tmp_path)
    target = (attempt / "servers" / "target-only" / "stderr.log").read_text(encoding="utf-8")
    assert "[ds4-spec" not in target and "\n[deepseek4] " in target
    for arm in _arms(attempt):
        if arm != "target-only":
            for stream in ("stderr.log", "stdout.log"):
                (attempt / "servers" / arm / stream).write_bytes(b"")
    assert modeless.speaks_protocol(attempt, _arms(attempt))
    assert derive(attempt)["reasons"] == [modeless.NO_MODE]


@pytest.mark.parametrize("name", ["h200-62880e2/fixed-verify", "h200-fork-41ee7d0/gate"])
def test_a_log_without_any_ds4_line_is_one_error_and_no_parity_ratio(name: str, tmp_path: Path) -> None:
    attempt = _attempt(REAL / f"{name}.bundle.tar.gz", tmp_path)
    before = derive(attempt)
    assert modeless.SILENT not in before["reasons"]
    _strip_ds4_lines(attempt)
    assert not modeless.speaks_protocol(attempt, _arms(attempt))
    doc = derive(attempt)
    assert (doc["verdict"], doc["reasons"][0], doc["exit_code"]) == ("error", modeless.SILENT, 3)
    assert set(doc["reasons"][1:]) <= set(before["reasons"])  # what the tree adds (41ee7d0 was built modified)
    assert doc["target_only"]["oracle"] is None
    assert [w["q"] for w in doc["widths"]] == [w["q"] for w in before["widths"]] and doc["widths"]
    for width in doc["widths"]:  # judged, but with no parity oracle: no cell, so no parity ratio to show
        assert (width["verdict"], width["prompts"], width["oracle"]) == ("error", [], None)


def test_the_message_says_what_was_expected_and_where_to_read_it() -> None:
    assert modeless.SILENT.startswith("this server does not print the DS4 reference-exact protocol (expected ")
    assert "docs/protocol.md" in modeless.SILENT


@pytest.mark.parametrize(("doc", "before", "link"), [("README.md", "## Quick start", "(docs/protocol.md)"),
                                                     ("docs/adopting.md", "## 0.", "(protocol.md)")])
def test_who_fits_is_said_before_anything_else(doc: str, before: str, link: str) -> None:
    """README's first screen and adopting.md's opening say what a server must do, link protocol.md, and quote
    the error a server that does not speak it gets."""
    text = (TESTS.parent / doc).read_text(encoding="utf-8")
    opening = " ".join(text[:text.index(before)].split())  # as read, whatever the line breaks
    for needed in ("[ds4-exact-verify-trace]", "[ds4-spec] reference-exact verifier:", "[ds4-spec] gen=",
                   "DFLASH_", "LUCE_", "SPEC_REFERENCE_EXACT=1", "GET /health", "POST /v1/chat/completions", link,
                   modeless.SILENT[:modeless.SILENT.index(" (")]):
        assert needed in opening, (doc, needed)


def test_no_oracle_is_chosen_for_a_silent_server_whatever_the_target_or_the_config(tmp_path: Path) -> None:
    """Not the tiny models' words (a target ds4ci wrote), not opted-in text parity: a silent server's answers are
    never compared; the same evidence with its DS4 lines left in gets the oracle those allow."""
    from ds4ci.judging.oracle import ORACLE_WORDS
    from ds4ci.judging.tinywords import KNOWN_TARGETS

    attempt = _attempt(REAL / "h200-62880e2" / "fixed-verify.bundle.tar.gz", tmp_path)
    tiny = judge.Settings(widths=(2, 3, 4), repeats=2, seed=1234, max_tokens=96, prompt_sha256s=("0" * 64,),
                          target_sha256=next(iter(KNOWN_TARGETS)), text_parity=True)
    assert judge.choose_oracle(attempt, _arms(attempt), tiny) == ORACLE_WORDS
    _strip_ds4_lines(attempt)
    assert judge.choose_oracle(attempt, _arms(attempt), tiny) is None
