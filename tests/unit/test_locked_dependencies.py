"""Every job that holds a write token installs hash-pinned dependencies only (requirements/publish.txt)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT
from ruamel.yaml import YAML

from ds4ci.options.values import read_toml

LOCK = ROOT / "requirements" / "publish.txt"
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==[^\s;]+(?: ;[^\\]*)? \\$")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _locked() -> dict[str, list[str]]:
    """Package -> the hash lines that follow each of its pins."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        pin = _PIN.match(line)
        if pin:
            current = found.setdefault(pin.group(1).lower(), [])
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            current.append(line.strip())
    return found


def test_every_dependency_and_the_build_backend_is_pinned_with_hashes() -> None:
    project = read_toml(ROOT / "pyproject.toml")
    wanted = {_name(r) for r in project["project"]["dependencies"]} | {"hatchling"}
    locked = _locked()
    assert wanted <= set(locked), sorted(wanted - set(locked))
    assert all(hashes for hashes in locked.values()), [k for k, h in locked.items() if not h]


def _write_jobs(path: Path) -> list[tuple[str, Any]]:
    doc = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    return [(name, job) for name, job in doc["jobs"].items()
            if any(str(v) == "write" for v in (job.get("permissions") or {}).values())]


@pytest.mark.parametrize("workflow", ["gate.yml", "report.yml"])
def test_a_job_with_a_write_token_installs_only_the_hash_pinned_lock(workflow: str) -> None:
    jobs = _write_jobs(ROOT / ".github" / "workflows" / workflow)
    assert jobs, workflow
    for name, job in jobs:
        installs = [line for step in job["steps"] for line in str(step.get("run", "")).splitlines()
                    if "pip install" in line]
        assert installs, (workflow, name)
        for line in installs:
            assert ("--require-hashes" in line and "requirements/publish.txt" in line and "--only-binary :all:" in line
                    ) or ("--no-deps" in line and "--no-build-isolation" in line), (workflow, name, line)


def test_report_yml_with_an_empty_ds4ci_ref_never_installs_the_adopting_repository(tmp_path: Path) -> None:
    """DS4CI_REF left empty (meant for ds4ci's own repository) in an adopter's repository: the checkout of that
    repository is not ds4ci, so the install step stops with what to set, before any pip runs (as GitHub runs it)."""
    import subprocess

    doc = YAML(typ="safe").load((ROOT / ".github" / "workflows" / "report.yml").read_text(encoding="utf-8"))
    (step,) = [s for s in doc["jobs"]["report"]["steps"] if str(s.get("name", "")).startswith("Install ds4ci")]
    (tmp_path / "ds4ci-src").mkdir()
    (tmp_path / "ds4ci-src" / "pyproject.toml").write_text('[project]\nname = "engine"\n')
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "DS4CI_REF": "", "RUNNER_TEMP": str(tmp_path / "temp")},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the checkout of this repository is not ds4ci: set DS4CI_REF" in done.stdout
    assert not (tmp_path / "temp").exists()  # no venv, no pip install
