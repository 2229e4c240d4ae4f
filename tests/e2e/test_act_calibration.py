"""Through the shipped workflows: a calibrated runner's comment and check run cite its calibration.

``ds4ci calibrate`` calibrates runner gfx1151 first, on this machine, with a tiny shell engine whose build
installs the simulator (its planted fault: one of the simulator's own fault switches) and the act
repository's own models, prompt and settings, signed by the runner's key. The trusted ds4ci.toml then names
the runner's records, its key and that the job signs with it (``signing = "job-key"``; the key at the default
path of the run's $HOME). act runs gate.yml
(tests/actkit.py): the gate seals the verified citation into its bundle, and the publish job, which has no
record and no --calibrations, cites it from the verified bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from actkit import MARKS, act_log, git, make_repo, run_act
from fakegithub import APP_TOKEN, FakeGitHub
from gatekit import CLI

from ds4ci.supervisor import sandbox

pytestmark = MARKS
RUNNER = "gfx1151"
SERVER_SH = """#!/bin/sh
FAULT=""
if [ -n "$FAULT" ]; then export DS4SIM_FAULTS="$FAULT"; fi
exec PYTHON -m ds4ci.simulator "$@"
"""
CATALOGUE = """engine = "tiny"
repository = "example/tiny-engine"
commits = ["{commit}"]
written = "2026-12-08"

[[mutant]]
name = "fused-verify-leaks"
summary = "the speculative arms verify with the fused (approximate) kernel"
file = "src/server.sh"
substitutions = [{{ old = 'FAULT=""', new = 'FAULT="leak-fused-verify"' }}]
"""


def _calibrate(tmp: Path, models: Path) -> tuple[str, str, dict[str, object]]:
    """The runner key, the engine commit, and the calibration record's calibration.json."""
    engine = tmp / "tiny-engine"
    (engine / "src").mkdir(parents=True)
    (engine / "src" / "server.sh").write_text(SERVER_SH, encoding="utf-8")
    (engine / "build.sh").write_text('set -e\nmkdir -p out\nsed "s#PYTHON#$DS4_PYTHON#" src/server.sh > out/s\n'
                                     "chmod +x out/s\nmv out/s out/dflash_server\n", encoding="utf-8")
    (engine / ".gitignore").write_text("out/\n", encoding="utf-8")
    (engine / "ds4ci.toml").write_text('[build]\ncommand = "sh build.sh"\nserver_bin = "out/dflash_server"\n',
                                       encoding="utf-8")
    git(engine, "init", "-q")
    git(engine, "add", "-A")
    git(engine, "commit", "-qm", "tiny engine")
    commit = git(engine, "rev-parse", "HEAD")
    (tmp / "c.toml").write_text(CATALOGUE.format(commit=commit), encoding="utf-8")
    # The act repository's own gate settings, with its models' absolute paths: the pins the workflow's gate has.
    # No [build] (calibrate builds the engine itself), no server pin, no runner tables.
    trusted = (tmp / "engine" / "ds4ci.toml").read_text(encoding="utf-8")
    shown, gate = trusted.split("[build]")[0], "[gate]" + trusted.split("[gate]")[1].split("[runners.")[0]
    lines = [x for x in (shown + gate).splitlines() if not x.startswith(("server_sha256", "evidence_dir"))]
    folder = tmp / "calibration-models"
    folder.mkdir()
    (folder / "ds4ci.toml").write_text("\n".join(lines).replace("${DS4_MODEL_DIR}", str(models)) + "\n", encoding="utf-8")
    key_path = tmp / "home" / ".config" / "ds4ci" / "runner-key.pem"  # the default path of the run's own $HOME
    made = subprocess.run([*CLI, "runner-key", "init", "--path", str(key_path)], capture_output=True, text=True,
                          check=True, timeout=120)
    key = made.stdout.strip().splitlines()[-1].split('"')[1]
    done = subprocess.run([*CLI, "calibrate", "--engine-config", str(engine / "ds4ci.toml"), "--models", str(folder),
                           "--runner", RUNNER, "--out", str(tmp / "records" / "first"), "--catalogue", str(tmp / "c.toml"),
                           "--signing-key", str(key_path)], cwd=tmp, capture_output=True, text=True, check=False,
                          timeout=900, env={**sandbox.runtime_environment(os.environ), "DS4_PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp / "records" / "first" / "record" / "calibration.json").read_text(encoding="utf-8"))
    return key, commit, doc


def test_a_calibrated_runner_s_comment_and_check_run_cite_its_calibration_through_the_workflows(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    models = tmp_path / "models"
    repo, _ = make_repo(tmp_path, models)
    key, commit, doc = _calibrate(tmp_path, models)
    assert doc["verdict"] == "pass" and doc["summary"]["line"].startswith("planted faults caught: 1 of 1"), doc
    # The trusted settings (the base commit's) name the runner's records and its key; the PR is moved onto them.
    config = repo / "ds4ci.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        '[runners.gfx1151]\n', textwrap.dedent(f"""\
            [runners.gfx1151]
            calibrations = "{tmp_path / 'records'}"
            public_key = "{key}"
            signing = "job-key"
            """), 1), encoding="utf-8")
    base = git(repo, "rev-parse", "main")
    git(repo, "commit", "-q", "--amend", "-a", "--no-edit")
    git(repo, "rebase", "-q", "--onto", "main", base, "feature")
    head = git(repo, "rev-parse", "feature")
    git(repo, "checkout", "-q", "main")
    fake.add_pull(7, head)

    proc = run_act(tmp_path, repo, fake, wheelhouse, models,
                   {"pr": "7", "head-sha": head, "widths": "", "runners": RUNNER}, token=APP_TOKEN)

    assert proc.returncode == 0, act_log(proc)
    assert fake.latest_states(head) == {f"ds4ci/{RUNNER}": "success"}, act_log(proc)
    line = (f"{doc['summary']['line']}; calibrated {str(doc['finished'])[:10]} on engine {commit[:7]}")
    (comment,) = fake.comments(7)
    assert f"**Proof strength**: {line}" in comment["body"], comment["body"]
    (run,) = fake.check_runs(head)
    assert line in run["output"]["summary"], run["output"]
    # The record merge.calibration_max_age_days reads: an artifact of this run, named by the cited day.
    day = str(doc["finished"])[:10]
    uploaded = tmp_path / "artifacts" / f"ds4ci-calibrated--{RUNNER}={day}" / "ds4ci-calibrated.json"
    assert json.loads(uploaded.read_text(encoding="utf-8")) == {"artifact": f"ds4ci-calibrated--{RUNNER}={day}",
                                                                "calibrated": {RUNNER: day}}, act_log(proc)
