"""A gate cites its runner's calibration from its own sealed bundle (``gate.calibrations``), end to end on the CPU.

The record is a real ``ds4ci calibrate`` of the tiny C++ engine of test_calibrate.py (its kit, imported), signed
with the runner key. Every gate is the real ``ds4ci gate`` with the trusted config naming the records' folder;
``ds4ci verify`` derives the citation again, and ``ds4ci publish`` (no --calibrations) posts it to the fake GitHub
over HTTP in the comment and the check run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakegithub import APP_TOKEN, FakeGitHub
from gatekit import CLI
from test_calibrate import _calibrate, _catalogue, _env, cmake_engine, models

__all__ = ["models"]  # the tiny models fixture of test_calibrate.py, shared, not copied
RUNNER = "cpu-cited"


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=900,
                          env=env or _env())


@pytest.fixture(scope="module")
def calibrated(models: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One calibration of runner cpu-cited (the control and one planted fault), signed by its runner key."""
    tmp = tmp_path_factory.mktemp("calibrated")
    source, build, commit = cmake_engine(tmp)
    made = _run("runner-key", "init", "--path", str(tmp / "config" / "ds4ci" / "runner-key.pem"), cwd=tmp)
    key = made.stdout.strip().splitlines()[-1].split('"')[1]
    catalogue = _catalogue(tmp / "c.toml", commit, "server.cpp", 'kFault = "{}"')
    done = _calibrate(tmp, "--build", str(build), "--models", str(models), "--runner", RUNNER, "--out",
                      str(tmp / "records" / "first"), "--catalogue", str(catalogue), "--only", "no-rollback")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = tmp / "records" / "first" / "record"
    doc = json.loads((record / "calibration.json").read_text(encoding="utf-8"))
    # The trusted config: the tiny models' own, with each runner's table naming its records and its key.
    config = models / f"cited-{os.getpid()}-{tmp.name}.toml"  # the models folder is the run's: a name of its own
    config.write_text((models / "ds4ci.toml").read_text(encoding="utf-8") + (
        f'\n[runners.{RUNNER}]\ncalibrations = "{tmp / "records"}"\npublic_key = "{key}"\n'
        f'\n[runners.cpu-other]\ncalibrations = "{tmp / "records"}"\npublic_key = "{key}"\n'), encoding="utf-8")
    return {"tmp": tmp, "source": source, "build": build, "commit": commit, "record": record, "doc": doc,
            "config": config, "key": key}


def _gate(c: dict[str, Any], work: Path, *extra: str, runner: str = RUNNER, config: str = "") -> subprocess.CompletedProcess[str]:
    work.mkdir()
    return _run("gate", "--config", config or str(c["config"]), "--server-bin", str(c["build"] / "dflash_server"),
                "--runner", runner, "--target-device", "cpu:0", "--source-dir", str(c["source"]), "--evidence-dir",
                str(work / "ev"), "--bundle-out", str(work / "b.tar.gz"), "--results-out", str(work / "results.json"),
                *extra, cwd=work, env=_env(XDG_CONFIG_HOME=str(c["tmp"] / "config")))


def _results(work: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((work / "results.json").read_text(encoding="utf-8"))
    return loaded


def test_the_gate_seals_the_verified_citation_verify_derives_it_and_publish_cites_it(calibrated: dict[str, Any],
                                                                                    tmp_path: Path) -> None:
    c, doc = calibrated, calibrated["doc"]
    work = tmp_path / "gate"
    gated = _gate(c, work)
    assert gated.returncode == 0, gated.stderr[-3000:]
    cited = _results(work)["calibration"]
    day = doc["finished"][:10]
    line = (f"planted faults caught: 1 of 1 at every width where they can act; calibrated {day} on engine "
            f"{c['commit'][:7]}")
    assert cited == {"state": "cited", "line": line, "record_sha256": doc["manifest_sha256"], "finished": doc["finished"],
                     "engine_commit": c["commit"], "caught": 1, "acting": 1}
    sealed = json.loads((Path(_results(work)["evidence"]["dir"]) / "citation.json").read_text(encoding="utf-8"))
    assert sealed["record"] == str(c["record"]) and sealed["problems"] == [] and sealed["calibration"]["verdict"] == "pass"

    # verify derives the citation again: the bundle verifies, and a results.json that says otherwise does not.
    verified = _run("verify", str(work / "b.tar.gz"), "--expect-config", str(c["config"]), cwd=work)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    forged = tmp_path / "forged"
    shutil.copytree(_results(work)["evidence"]["dir"], forged)
    text = (forged / "results.json").read_text(encoding="utf-8")
    (forged / "results.json").write_text(text.replace("caught: 1 of 1", "caught: 9 of 9"), encoding="utf-8")
    refused = _run("verify", str(forged), cwd=work)
    assert refused.returncode == 3 and "calibration.line recorded" in refused.stdout, refused.stdout

    # publish reads it from the verified bundle alone (no --calibrations, no other artifact).
    fake = FakeGitHub().start()
    try:
        head = _results(work)["revisions"]["head"]["sha"]
        fake.add_pull(42, head, [head])
        url = fake.add_run(800, title=f"ds4ci gate {head}", jobs={f"verdict {RUNNER}": "success"})
        # As the publishing job: the Actions token (an app installation token, the one that makes check runs).
        env = dict(os.environ, GITHUB_TOKEN=APP_TOKEN, DS4CI_GITHUB_THROTTLE="0", GITHUB_ACTIONS="true")
        env.pop("GITHUB_STEP_SUMMARY", None)
        record = tmp_path / "calibrated.json"
        published = subprocess.run([sys.executable, "-m", "ds4ci", "publish", str(work / "b.tar.gz"), "--repo",
                                    "acme/engine", "--pr", "42", "--api-url", fake.url, "--expect-config", str(c["config"]),
                                    "--target-url", url, "--calibration-record", str(record)],
                                   capture_output=True, text=True, env=env, check=False, timeout=300)
        assert published.returncode == 0, published.stderr[-3000:]
        (comment,) = fake.comments(42)
        assert f"**Proof strength**: {line}" in comment["body"]
        (check,) = [r for r in fake.check_runs(head) if r["name"] == f"ds4ci/{RUNNER}"]
        assert f"calibrated {day} on engine {c['commit'][:7]}" in check["output"]["summary"]
        # The record gate.yml uploads; merge-check reads the day from the vouching run's artifact of that name.
        assert json.loads(record.read_text()) == {"artifact": f"ds4ci-calibrated--{RUNNER}={day}",
                                                  "calibrated": {RUNNER: day}}
        merge_toml = tmp_path / "merge.toml"
        merge_toml.write_text(f'[merge]\nrunners = ["{RUNNER}"]\napprovals = 0\ncalibration_max_age_days = 30\n')
        check_env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
        check_env.update({"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": APP_TOKEN, "GITHUB_REPOSITORY": "acme/engine",
                          "DS4CI_GITHUB_THROTTLE": "0"})
        merge_check = [sys.executable, "-m", "ds4ci", "merge-check", "--pr", "42", "--config", str(merge_toml)]
        before = subprocess.run(merge_check, capture_output=True, text=True, env=check_env, check=False, timeout=120)
        assert before.returncode == 1 and f"records no calibration of runner {RUNNER}" in before.stdout, before.stdout
        fake.add_artifact(800, json.loads(record.read_text())["artifact"])
        ready = subprocess.run(merge_check, capture_output=True, text=True, env=check_env, check=False, timeout=120)
        assert ready.returncode == 0, ready.stdout + ready.stderr
    finally:
        fake.stop()


def test_a_runner_without_a_record_is_never_calibrated_and_others_records_are_named(calibrated: dict[str, Any],
                                                                                    tmp_path: Path) -> None:
    work = tmp_path / "gate"
    gated = _gate(calibrated, work, runner="cpu-other")
    assert gated.returncode == 0, gated.stderr[-3000:]
    cited = _results(work)["calibration"]
    assert cited["state"] == "never" and cited["record_sha256"] is None
    assert cited["line"].startswith(f"runner cpu-other was never calibrated with these tiny models (no calibration "
                                    f"record in {calibrated['tmp'] / 'records'} matches it)")
    assert f"records of other runners there are not this runner's ({RUNNER})" in cited["line"]


def test_a_tampered_record_or_one_signed_by_another_key_is_an_error_that_says_so(calibrated: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    c = calibrated
    folder = tmp_path / "records"
    shutil.copytree(c["record"], folder / "record")
    config = c["config"].parent / f"tampered-{os.getpid()}-{tmp_path.name}.toml"
    config.write_text(c["config"].read_text(encoding="utf-8").replace(str(c["tmp"] / "records"), str(folder)),
                      encoding="utf-8")
    calibration = folder / "record" / "calibration.json"
    calibration.write_text(calibration.read_text(encoding="utf-8").replace('"caught": 1', '"caught": 2'), encoding="utf-8")
    tampered = _gate(c, tmp_path / "tampered", config=str(config))
    assert tampered.returncode == 3, tampered.stderr[-3000:]
    doc = _results(tmp_path / "tampered")
    assert doc["verdict"] == "error" and doc["calibration"]["state"] == "refused"
    assert doc["reasons"] == [doc["calibration"]["line"]]
    assert doc["calibration"]["line"].startswith(f"runner {RUNNER}'s latest calibration record ({folder / 'record'}) "
                                                 "is refused: it does not verify: calibration.json differs")
    assert not doc["widths"] and "Traceback" not in tampered.stderr  # no server started for a refused record
    assert "is refused" in tampered.stdout + tampered.stderr
    verified = _run("verify", str(tmp_path / "tampered" / "b.tar.gz"), cwd=tmp_path)
    assert verified.returncode == 4, verified.stdout  # intact bundle, verdict error: the refusal is derived again

    # The untouched record, but the trusted config names another key for this runner: refused too.
    shutil.rmtree(folder / "record")
    shutil.copytree(c["record"], folder / "record")
    other = _run("runner-key", "init", "--path", str(tmp_path / "other" / "ds4ci" / "runner-key.pem"), cwd=tmp_path)
    other_key = other.stdout.strip().splitlines()[-1].split('"')[1]
    config.write_text(config.read_text(encoding="utf-8").replace(c["key"], other_key), encoding="utf-8")
    work = tmp_path / "foreign"
    work.mkdir()
    foreign = _run("gate", "--config", str(config), "--server-bin", str(c["build"] / "dflash_server"), "--runner", RUNNER,
                   "--target-device", "cpu:0", "--source-dir", str(c["source"]), "--evidence-dir", str(work / "ev"),
                   "--results-out", str(work / "results.json"), cwd=work,
                   env=_env(XDG_CONFIG_HOME=str(tmp_path / "other")))
    assert foreign.returncode == 3, foreign.stderr[-3000:]
    line = _results(work)["calibration"]["line"]
    assert "is refused: it does not verify: not signed by runner cpu-cited's key: no signature in attestation.json " \
           "verifies" in line, line
