"""Runner keys and signed evidence: a real gate signs, `ds4ci verify` and publish's loader check the signature.

Forged, re-sealed, wrong-key and missing signatures all make the bundle an error.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from gatekit import DS4CI, Workspace

from ds4ci.evidence import attestation, keys
from ds4ci.github import verified


def _key(tmp_path: Path, name: str) -> tuple[Path, str]:
    path = tmp_path / "keys" / name
    proc = subprocess.run([DS4CI, "runner-key", "init", "--path", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln.split('"')[1] for ln in proc.stdout.splitlines() if ln.startswith("public_key = ")]
    return path, line


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path, str]:
    """One signed, passing bundle (a promoted attempt directory) and the keys: (bundle, its key line, other key, line)."""
    root = tmp_path_factory.mktemp("signed")
    key, line = _key(root, "runner.pem")
    other, other_line = _key(root, "other.pem")
    ws = Workspace.create(root / "ws")
    run = ws.gate("--signing-key", str(key), widths="2", bundle_out=root / "bundle.tar.gz")
    assert run.code == 0, run.stderr
    (bundle,) = (ws.root / "evidence" / "runs").iterdir()
    return bundle, line, other, other_line


def verify(bundle: Path, *keys_: str) -> subprocess.CompletedProcess[str]:
    args = [a for k in keys_ for a in ("--key", k)]
    return subprocess.run([DS4CI, "verify", str(bundle), *args], capture_output=True, text=True, check=False)


def copy(bundle: Path, tmp_path: Path) -> Path:
    out = tmp_path / bundle.name
    shutil.copytree(bundle, out)
    return out


def reseal(bundle: Path, rel: str, data: bytes) -> None:
    """Edit one sealed file and seal again, as anyone without the key could: manifest and results digest agree."""
    (bundle / rel).write_bytes(data)
    manifest = json.loads((bundle / "manifest.json").read_text())
    for entry in manifest["evidence"]:
        if entry["path"] == rel:
            entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    doc = json.loads((bundle / "results.json").read_text())
    doc["evidence"]["manifest_sha256"] = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    (bundle / "results.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def test_runner_key_init_writes_a_private_key_only_its_owner_reads_and_never_overwrites(tmp_path: Path) -> None:
    path, line = _key(tmp_path, "k.pem")
    assert path.stat().st_mode & 0o777 == 0o600 and line.startswith("ed25519:")
    assert keys.public_line(keys.load_private(path).public_key()) == line
    again = subprocess.run([DS4CI, "runner-key", "init", "--path", str(path)], capture_output=True, text=True, check=False)
    assert again.returncode == 2 and "never overwritten" in again.stderr


def test_a_signed_bundle_verifies_with_its_runner_key(signed: tuple[Path, str, Path, str]) -> None:
    bundle, line, _, _ = signed
    envelope = json.loads((bundle / "attestation.json").read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"][0]["digest"]["sha256"] == hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    assert statement["predicate"]["verdict"] == "pass" and statement["predicate"]["runner"] == "test-runner"
    proc = verify(bundle, line)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    archive = verify(bundle.parents[3] / "bundle.tar.gz", line)  # --bundle-out carries the attestation too
    assert archive.returncode == 0, archive.stdout + archive.stderr


def test_wrong_key_forged_missing_and_resealed_bundles_do_not_verify(
    signed: tuple[Path, str, Path, str], tmp_path: Path
) -> None:
    bundle, line, other, other_line = signed
    wrong = verify(bundle, other_line)
    assert wrong.returncode == 3 and "not signed by runner test-runner's key" in wrong.stdout

    forged = copy(bundle, tmp_path / "forged")
    attestation.sign(forged, other)  # a well-formed attestation by someone else's key
    assert verify(forged, line).returncode == 3

    missing = copy(bundle, tmp_path / "missing")
    (missing / "attestation.json").unlink()
    proc = verify(missing, line)
    assert proc.returncode == 3 and "has no attestation.json" in proc.stdout
    assert verify(missing).returncode == 0  # without a key configured, signatures are not asked for

    resealed = copy(bundle, tmp_path / "resealed")
    attempt = json.loads((resealed / "attempt.json").read_text())
    attempt["argv"] = ["edited after the run"]
    reseal(resealed, "attempt.json", (json.dumps(attempt, indent=2) + "\n").encode())
    assert verify(resealed).returncode == 0  # integrity alone cannot tell: the edit was sealed again
    proc = verify(resealed, line)
    assert proc.returncode == 3 and "subject disagrees with the bundle" in proc.stdout


def test_a_predicate_that_disagrees_with_the_bundle_is_an_error(
    signed: tuple[Path, str, Path, str], tmp_path: Path
) -> None:
    bundle, line, _, _ = signed
    key = bundle.parents[3] / "keys" / "runner.pem"
    lying = copy(bundle, tmp_path / "lying")
    doc = json.loads((lying / "results.json").read_text())
    doc["runner"]["name"] = "gfx1151"
    (lying / "results.json").write_text(json.dumps(doc))
    attestation.sign(lying, key)  # signed with the right key, but for another runner's name
    (lying / "results.json").write_bytes((bundle / "results.json").read_bytes())
    problems = attestation.check(lying, [line], "test-runner")
    assert problems and "predicate disagrees" in problems[0]


def test_publish_with_a_trusted_config_that_names_keys_refuses_unsigned_bundles(
    signed: tuple[Path, str, Path, str], tmp_path: Path
) -> None:
    bundle, line, _, other_line = signed
    config = tmp_path / "ds4ci.toml"
    config.write_text(f'[runners.test-runner]\npublic_key = "{line}"\n')
    trusted = attestation.trusted_keys(config)
    (ok,) = verified.load([bundle], verified.Trust(keys=trusted))
    assert ok.doc["verdict"] == "pass"
    unsigned = copy(bundle, tmp_path / "unsigned")
    (unsigned / "attestation.json").unlink()
    (published,) = verified.load([unsigned], verified.Trust(keys=trusted))
    assert published.doc["verdict"] == "error"
    assert "not signed by runner test-runner's key" in published.doc["reasons"][0]
    config.write_text(f'[runners.test-runner]\npublic_key = "{other_line}"\n')
    (wrong,) = verified.load([bundle], verified.Trust(keys=attestation.trusted_keys(config)))
    assert wrong.doc["verdict"] == "error"
    config.write_text(f'[runners.gfx1151]\npublic_key = "{line}"\n')
    (unknown,) = verified.load([bundle], verified.Trust(keys=attestation.trusted_keys(config)))
    assert unknown.doc["verdict"] == "error" and "none for runner test-runner" in unknown.doc["reasons"][0]


def test_pae_matches_the_dsse_specification_vector() -> None:
    assert attestation.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_during_a_rotation_the_trusted_config_may_name_two_keys(
    signed: tuple[Path, str, Path, str], tmp_path: Path
) -> None:
    bundle, line, _, other_line = signed
    config = tmp_path / "ds4ci.toml"
    config.write_text(f'[gate]\nwidths = [2]\n[runners.test-runner]\npublic_key = ["{other_line}", "{line}"]\n')
    assert attestation.bundle_problems(bundle, "test-runner", attestation.trusted_keys(config)) == []
    proc = subprocess.run([DS4CI, "verify", str(bundle), "--expect-config", str(config)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_job_whose_user_can_read_the_key_refuses_to_sign_unless_the_trusted_config_says_job_key(
        tmp_path: Path, signed: tuple[Path, str, Path, str]) -> None:
    """Under GitHub Actions the runner user's own key (the default path) is within every job's reach: the gate
    refuses it before anything runs, unless the trusted config opts in; the report then says it was a job key."""
    bundle = signed[0]
    assert json.loads((bundle / "results.json").read_text())["signing"] == "local"  # outside Actions and the service
    ws = Workspace.create(tmp_path / "ws")
    home = tmp_path / "config"
    assert subprocess.run([DS4CI, "runner-key", "init"], env=ws.env(XDG_CONFIG_HOME=str(home)), capture_output=True,
                          check=False).returncode == 0
    job = ws.env(GITHUB_ACTIONS="true", XDG_CONFIG_HOME=str(home))
    refused = ws.gate(env=job, widths="2")
    assert refused.code == 2 and "is readable by this job's user" in refused.stderr, refused.stderr
    assert str(home / "ds4ci" / "runner-key.pem") in refused.stderr and refused.results is None
    assert not (ws.root / "evidence").exists()  # refused before any attempt began
    opt_in = tmp_path / "ds4ci.toml"
    opt_in.write_text('[gate]\nsigning = "job-key"\n')
    run = ws.gate(env=job, widths="2", config=opt_in)
    assert run.code == 0, run.stderr
    assert run.results is not None and run.results["signing"] == "job-key"
    report = subprocess.run([DS4CI, "report", str(next((ws.root / "evidence" / "runs").iterdir()) / "results.json")],
                            capture_output=True, text=True, check=False)
    assert "signed with a key this job's own user could read" in report.stdout, report.stdout + report.stderr
