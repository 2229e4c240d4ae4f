"""Evidence: unique attempts, manifests, promotion that never replaces anything."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

from ds4ci.errors import NoVerdictError
from ds4ci.evidence import store


def test_attempts_are_unique_and_fresh(tmp_path: Path) -> None:
    a = store.start_attempt(tmp_path, "r1")
    b = store.start_attempt(tmp_path, "r1")
    assert a.path != b.path
    assert a.path.is_dir() and not any(a.path.iterdir())


def test_manifest_lists_every_file_with_its_digest(tmp_path: Path) -> None:
    attempt = store.start_attempt(tmp_path, "r1")
    (attempt.path / "servers").mkdir()
    (attempt.path / "servers" / "stderr.log").write_text("hello\n")
    (attempt.path / "results.json").write_text("{}")
    digest = store.seal(attempt, [{"role": "target", "path": "/m/t", "size": 1, "sha256": "0" * 64}])
    manifest_path = attempt.path / "manifest.json"
    assert hashlib.sha256(manifest_path.read_bytes()).hexdigest() == digest
    manifest = json.loads(manifest_path.read_text())
    assert manifest["evidence"] == [
        {"path": "servers/stderr.log", "size": 6, "sha256": hashlib.sha256(b"hello\n").hexdigest()}
    ]
    assert manifest["inputs"][0]["role"] == "target"


def test_promotion_never_replaces_even_an_empty_directory(tmp_path: Path) -> None:
    attempt = store.start_attempt(tmp_path, "r1")
    (attempt.path / "x").write_text("1")
    final = attempt.final_path("pass")
    final.mkdir(parents=True)
    with pytest.raises(NoVerdictError, match="already exists"):
        store.promote(attempt, "pass")
    assert (attempt.path / "x").exists()  # the attempt stays intact where it was
    assert not any(final.iterdir())


def test_failed_attempts_go_to_failed_not_runs(tmp_path: Path) -> None:
    ok = store.start_attempt(tmp_path, "r1")
    bad = store.start_attempt(tmp_path, "r1")
    assert store.promote(ok, "pass").parent == tmp_path / "runs"
    assert store.promote(bad, "fail").parent == tmp_path / "failed"
    assert not any((tmp_path / "attempts").iterdir())


def test_concurrent_promotions_to_one_name_leave_exactly_one_winner(tmp_path: Path) -> None:
    sources = []
    for i in range(8):
        src = tmp_path / f"src{i}"
        src.mkdir()
        (src / "who").write_text(str(i))
        sources.append(src)
    dst = tmp_path / "final"
    outcomes: list[str] = []

    def move(src: Path) -> None:
        try:
            store.rename_noreplace(src, dst)
            outcomes.append("won")
        except FileExistsError:
            outcomes.append("refused")

    threads = [threading.Thread(target=move, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("won") == 1 and outcomes.count("refused") == 7
    winner = (dst / "who").read_text()
    assert not (tmp_path / f"src{winner}").exists()
    assert sum(1 for s in sources if s.exists()) == 7


def test_unwritable_evidence_dir_is_no_verdict(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(NoVerdictError, match="writable directory"):
        store.start_attempt(blocker, "r1")


def _sealed_parts(tmp_path: Path) -> tuple[store.Attempt, store.Seals]:
    """An attempt whose build and target-only server parts were sealed as they ended."""
    attempt = store.start_attempt(tmp_path, "r1")
    seals = store.Seals()
    (attempt.path / "build").mkdir()
    (attempt.path / "build" / "build.log").write_text("[1/1] built\n")
    seals.close(attempt.path, "the build ended", ["build"])
    (attempt.path / "servers" / "target-only").mkdir(parents=True)
    (attempt.path / "servers" / "target-only" / "stderr.log").write_text("trace\n")
    seals.close(attempt.path, "the target-only server stopped", ["servers/target-only"])
    (attempt.path / "run.json").write_text("{}\n")  # written after the parts: sealed with the manifest
    return attempt, seals


def test_unchanged_sealed_parts_make_the_same_manifest_as_without_seals(tmp_path: Path) -> None:
    attempt, seals = _sealed_parts(tmp_path)
    assert store.build_manifest(attempt.path, [], seals) == store.build_manifest(attempt.path, [])
    assert set(seals.files) == {"build/build.log", "servers/target-only/stderr.log"}
    assert seals.files["build/build.log"][2] == "the build ended"


@pytest.mark.parametrize(("change", "said"), [
    ("rewrite", "servers/target-only/stderr.log (sealed when the target-only server stopped: 6 bytes"),
    ("remove", "build/build.log (sealed when the build ended) is gone"),
    ("add", "servers/target-only/props.json appeared in servers/target-only/ after it was sealed"),
])
def test_a_sealed_part_that_changed_is_no_manifest_and_the_attempt_is_kept(
    tmp_path: Path, change: str, said: str
) -> None:
    attempt, seals = _sealed_parts(tmp_path)
    if change == "rewrite":
        (attempt.path / "servers" / "target-only" / "stderr.log").write_text("forged\n")
    elif change == "remove":
        (attempt.path / "build" / "build.log").unlink()
    else:
        (attempt.path / "servers" / "target-only" / "props.json").write_text("{}\n")
    with pytest.raises(NoVerdictError, match="the evidence changed after it was sealed") as raised:
        store.seal(attempt, [], seals)
    assert said in str(raised.value)
    assert not (attempt.path / store.MANIFEST).exists()
    assert (attempt.path / "run.json").is_file()
