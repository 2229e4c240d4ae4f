"""`ds4ci verify` re-derives verdicts from raw evidence: forged results never verify."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gatekit import DS4CI, Workspace, sha256


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One passing and one failing bundle from real gate runs (a directory and an archive each)."""
    root = tmp_path_factory.mktemp("bundles")
    ws = Workspace.create(root, prompts=2)
    good = ws.gate(widths="2,3", bundle_out=root / "pass.tar.gz")
    assert good.code == 0, good.stderr
    bad = ws.gate(faults="leak-fused-verify@q3", widths="2,3", bundle_out=root / "fail.tar.gz")
    assert bad.code == 1, bad.stderr
    assert good.results is not None and bad.results is not None
    return {
        "pass": Path(good.results["evidence"]["dir"]), "fail": Path(bad.results["evidence"]["dir"]),
        "pass.tar.gz": root / "pass.tar.gz", "fail.tar.gz": root / "fail.tar.gz",
    }


def verify(*paths: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, "verify", *map(str, paths), *extra], capture_output=True, text=True, timeout=120, check=False)


def copy(bundles: dict[str, Path], which: str, tmp_path: Path) -> Path:
    target = tmp_path / which
    shutil.copytree(bundles[which], target, symlinks=True)
    return target


def edit_results(bundle: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = bundle / "results.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def reseal(bundle: Path) -> None:
    """What a forger with write access does after editing evidence: recompute manifest and digest."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    for entry in manifest["evidence"]:
        data = (bundle / entry["path"]).read_bytes()
        entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    digest = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    edit_results(bundle, lambda d: d["evidence"].update(manifest_sha256=digest))


def test_intact_bundles_verify_with_their_own_verdict(bundles: dict[str, Path]) -> None:
    assert verify(bundles["pass"]).returncode == 0
    failing = verify(bundles["fail"])
    assert failing.returncode == 1 and "recomputed verdict fail" in failing.stdout
    assert verify(bundles["pass"], bundles["fail"]).returncode == 1


def test_archives_verify_like_directories(bundles: dict[str, Path]) -> None:
    assert verify(bundles["pass.tar.gz"]).returncode == 0
    assert verify(bundles["fail.tar.gz"]).returncode == 1


def test_json_prints_the_recomputed_document(bundles: dict[str, Path]) -> None:
    proc = verify(bundles["fail"], extra=("--json",))
    (doc,) = json.loads(proc.stdout)
    assert doc["verifies"] is True and doc["verdict"] == "fail"
    assert [w["verdict"] for w in doc["recomputed"]["widths"]] == ["pass", "fail"]


FORGERIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "overall verdict flipped": lambda d: d.update(verdict="pass", exit_code=0, reasons=[]),
    "width verdict flipped": lambda d: d["widths"][1].update(verdict="pass", reasons=[]),
    "cell verdict flipped": lambda d: d["widths"][1]["prompts"][0].update(verdict="pass"),
    "failing width dropped": lambda d: d.update(widths=d["widths"][:1]),
    "counters edited": lambda d: d["widths"][0]["prompts"][0].update(matched=1),
    "parity count edited": lambda d: d["widths"][1]["prompts"][0].update(parity_requests=2),
    "mismatch removed": lambda d: d["widths"][1]["prompts"][0].update(mismatch=None),
    "target-only edited": lambda d: d["target_only"].update(deterministic=False),
    "identities edited": lambda d: d["identities"]["target"].update(sha256="0" * 64),
    "settings edited": lambda d: d["settings"].update(widths=[2]),
    "manifest digest removed": lambda d: d["evidence"].update(manifest_sha256=None),
}


@pytest.mark.parametrize("name", FORGERIES)
def test_forged_results_do_not_verify(bundles: dict[str, Path], tmp_path: Path, name: str) -> None:
    bundle = copy(bundles, "fail", tmp_path)
    edit_results(bundle, FORGERIES[name])
    proc = verify(bundle)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "evidence does not verify" in proc.stdout


def test_a_flipped_width_names_the_first_differing_token(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy(bundles, "fail", tmp_path)
    edit_results(bundle, FORGERIES["width verdict flipped"])
    out = verify(bundle).stdout
    assert "q=3 verdict recorded pass, recomputed fail: " in out and "token IDs differ" in out


def test_a_forger_who_reseals_an_edited_log_is_caught_by_the_recomputation(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy(bundles, "pass", tmp_path)
    log = bundle / "servers" / "q2" / "stderr.log"
    text = log.read_text()
    summary = next(line for line in text.splitlines() if line.startswith("[ds4-spec] gen="))
    log.write_text(text.replace(summary, re.sub(r"offered=(\d+)", lambda m: f"offered={int(m.group(1)) + 1}", summary), 1))
    reseal(bundle)
    proc = verify(bundle)
    assert proc.returncode == 3 and "q=2" in proc.stdout


@pytest.mark.parametrize("tamper", ["edit a log", "remove a file", "add a file", "add a symlink"])
def test_tampered_files_do_not_verify(bundles: dict[str, Path], tmp_path: Path, tamper: str) -> None:
    bundle = copy(bundles, "pass", tmp_path)
    log = bundle / "servers" / "q2" / "stderr.log"
    expected = {
        "edit a log": "does not match the manifest", "remove a file": "listed in the manifest but missing",
        "add a file": "not listed in the manifest", "add a symlink": "symbolic link",
    }[tamper]
    if tamper == "edit a log":
        log.write_text(log.read_text() + "x\n")
    elif tamper == "remove a file":
        log.unlink()
    elif tamper == "add a file":
        (bundle / "servers" / "extra.txt").write_text("x")
    else:
        (bundle / "servers" / "link").symlink_to("/etc/passwd")
    proc = verify(bundle)
    assert proc.returncode == 3 and expected in proc.stdout, proc.stdout


def test_an_archive_with_a_link_member_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("attempt/results.json")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    proc = verify(archive)
    assert proc.returncode == 3 and "links are refused" in proc.stdout


def test_an_unpromoted_attempt_does_not_verify(tmp_path: Path) -> None:
    (tmp_path / "attempt").mkdir()
    proc = verify(tmp_path / "attempt")
    assert proc.returncode == 3 and "manifest.json is missing" in proc.stdout


def test_expectations_from_a_trusted_config(bundles: dict[str, Path], tmp_path: Path) -> None:
    results = json.loads((bundles["pass"] / "results.json").read_text())
    target = results["identities"]["target"]["sha256"]
    good = tmp_path / "good.toml"
    good.write_text(f'[gate]\nwidths = [2, 3]\nmax_tokens = 64\ntarget_sha256 = "{target}"\n')
    assert verify(bundles["pass"], extra=("--expect-config", str(good))).returncode == 0
    wider = tmp_path / "wider.toml"
    wider.write_text(f'[gate]\nwidths = [2, 3, 4]\ntarget_sha256 = "{"1" * 64}"\n')
    proc = verify(bundles["pass"], extra=("--expect-config", str(wider)))
    assert proc.returncode == 3
    assert "widths: the trusted config expects [2, 3, 4]" in proc.stdout and "target: the trusted config pins" in proc.stdout


def test_the_gate_and_verify_judge_alike(bundles: dict[str, Path]) -> None:
    """verify's recomputation equals what the gate itself recorded, field by field."""
    proc = verify(bundles["fail"], extra=("--json",))
    (doc,) = json.loads(proc.stdout)
    recorded = json.loads((bundles["fail"] / "results.json").read_text())
    assert doc["recomputed"]["widths"] == recorded["widths"]
    assert doc["recomputed"]["target_only"] == recorded["target_only"]
    assert sha256(bundles["fail"] / "manifest.json") == recorded["evidence"]["manifest_sha256"]


def _drop_from_manifest(bundle: Path, rel: str) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["evidence"] = [e for e in manifest["evidence"] if e["path"] != rel]
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_a_resealed_lifecycle_with_fewer_requests_than_repeats_does_not_verify(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy(bundles, "pass", tmp_path)
    path = bundle / "servers" / "q2" / "lifecycle.json"
    life = json.loads(path.read_text())
    dropped = life["requests"][2:]  # the second repeat of both prompts
    life["requests"] = life["requests"][:2]
    path.write_text(json.dumps(life))
    for entry in dropped:
        for rel in (entry["request"], entry["response"]):
            (bundle / rel).unlink()
            _drop_from_manifest(bundle, rel)
    reseal(bundle)
    proc = verify(bundle)
    assert proc.returncode == 3, proc.stdout
    assert "servers/q2/lifecycle.json records 2 request(s); 2 prompt(s) x 2 repeat(s) = 4 were due" in proc.stdout


def resealed_edit(bundle: Path, rel: str, change: Callable[[Any], None]) -> subprocess.CompletedProcess[str]:
    """Edit one sealed JSON file, re-seal as a forger would, and verify."""
    doc = json.loads((bundle / rel).read_text())
    change(doc)
    (bundle / rel).write_text(json.dumps(doc))
    reseal(bundle)
    return verify(bundle)


def test_a_lifecycle_path_out_of_the_bundle_is_never_followed(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy(bundles, "pass", tmp_path)
    proc = resealed_edit(bundle, "servers/q2/lifecycle.json", lambda d: d["requests"][0].update(request="/etc/hostname"))
    assert proc.returncode == 3 and "'request': '/etc/hostname'" in proc.stdout, proc.stdout


def test_an_answer_missing_from_the_bundle_is_an_error(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy(bundles, "pass", tmp_path)
    rel = "requests/q3/p1-r2.response.json"
    (bundle / rel).unlink()
    _drop_from_manifest(bundle, rel)
    reseal(bundle)
    proc = verify(bundle)
    assert proc.returncode == 3 and "p1-r2.response.json is missing" in proc.stdout, proc.stdout


def test_a_resealed_answer_with_other_text_is_judged_a_contradiction(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy(bundles, "pass", tmp_path)
    rel = "requests/q2/p0-r1.response.json"
    proc = resealed_edit(bundle, rel, lambda d: d["choices"][0]["message"].update(content="edited"))
    assert proc.returncode == 3, proc.stdout
    assert "q=2 verdict recorded pass, recomputed fail: q=2 prompt 0 request 1: the server's answer contradicts" in proc.stdout


def test_a_lifecycle_value_of_the_wrong_type_is_one_line_not_a_traceback(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy(bundles, "pass", tmp_path)
    proc = resealed_edit(bundle, "servers/q3/lifecycle.json", lambda d: d.update(swept=5))
    assert proc.returncode == 3 and "swept must be an array, found int" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
