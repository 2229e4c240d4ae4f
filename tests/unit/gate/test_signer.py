"""signer.py: under GitHub Actions a key the job's own user can read signs only with signing = "job-key"."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4ci.errors import UsageError
from ds4ci.evidence import keys
from ds4ci.gate.signer import JOB_KEY, LOCAL, SERVICE, signer
from ds4ci.options import config


def cfg_of(tmp_path: Path, extra: str = "", **flags: object) -> config.GateConfig:
    toml = tmp_path / "ds4ci.toml"
    toml.write_text(f'[gate]\nserver = "simulator"\ntarget = "t"\ntarget_sha256 = "{"a" * 64}"\ndraft = "d"\n'
                    f'draft_sha256 = "{"b" * 64}"\nprompts = [{{file = "p", sha256 = "{"c" * 64}"}}]\n{extra}')
    return config.load(toml, {"runner": "r1", **flags}, check_files=False)


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "runner-key.pem"
    keys.create(path)
    return path


def test_a_job_that_can_read_its_key_refuses_to_sign_unless_the_trusted_config_allows_it(
        tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    with pytest.raises(UsageError) as refused:
        signer(cfg_of(tmp_path), key)
    said = str(refused.value)
    assert f"{key} is readable by this job's user" in said and 'signing = "job-key"' in said
    assert "ds4ci service install --key-from" in said
    assert signer(cfg_of(tmp_path, "signing = \"job-key\"\n"), key) == JOB_KEY
    # --service-state cannot make a job's own key pass for the service's
    with pytest.raises(UsageError):
        signer(cfg_of(tmp_path, service_state=tmp_path / "state"), key)
    assert signer(cfg_of(tmp_path), None) is None  # nothing signs: nothing to refuse


def test_outside_actions_the_service_and_a_local_run_say_so(tmp_path: Path, key: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert signer(cfg_of(tmp_path, service_state=tmp_path / "state"), key) == SERVICE
    assert signer(cfg_of(tmp_path), key) == LOCAL


def test_the_runner_table_may_allow_a_job_key_for_one_runner(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path, '[runners.r1]\nsigning = "job-key"\n[runners.r2]\n')
    assert cfg.signing == JOB_KEY
    with pytest.raises(UsageError, match="expected one of service, job-key"):
        cfg_of(tmp_path, 'signing = "anyone"\n')
