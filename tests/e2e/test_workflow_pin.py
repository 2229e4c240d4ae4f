"""The ds4ci the workflows run (``DS4CI_REF``), as `ds4ci init` writes it and `config check`/`preflight` read it.

The CLI runs as a real process in new git repositories; act runs the same workflows in test_act_e2e.py and test_act_pr_events.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

DS4CI = str(Path(sys.executable).parent / "ds4ci")
ROOT = Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "DS4_", "DS4CI_SANDBOX_"))}
    return {**env, "HOME": str(tmp / "home"), "XDG_CACHE_HOME": str(tmp / "cache"), **extra}


def _run(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, *args], cwd=cwd, env=_env(cwd.parent, **extra), capture_output=True, text=True,
                          timeout=180, check=False)


def _repo(tmp: Path) -> Path:
    repo = tmp / "engine"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def _ref_lines(repo: Path) -> dict[str, list[str]]:
    return {name: [line for line in (repo / ".github" / "workflows" / name).read_text().splitlines()
                   if line.startswith("  DS4CI_REF:")] for name in ("gate.yml", "report.yml")}


REFS = ["acme/ds4ci@v0.1.0", f"acme/ds4ci@{COMMIT}", "my-org/ds4ci.fork@v1.2.3-rc.1"]


@pytest.mark.parametrize("ref", REFS)
def test_init_writes_the_ds4ci_ref_into_both_copies_and_nothing_warns(tmp_path: Path, ref: str) -> None:
    repo = _repo(tmp_path)
    init = _run("init", "--simulator", "--runner", "local", "--ds4ci-ref", ref, "--copy-workflows", cwd=repo)
    assert init.returncode == 0, init.stderr
    assert "placeholder" not in init.stdout
    assert _ref_lines(repo) == {"gate.yml": [f'  DS4CI_REF: "{ref}"'], "report.yml": [f'  DS4CI_REF: "{ref}"']}
    check = _run("config", "check", cwd=repo)
    assert check.returncode == 0 and "DS4CI_REF" not in check.stderr, check.stderr


@pytest.mark.parametrize("ref", REFS)
def test_init_writes_a_short_caller_pinned_twice_to_the_ref_and_nothing_warns(tmp_path: Path, ref: str) -> None:
    repo = _repo(tmp_path)
    init = _run("init", "--simulator", "--runner", "local", "--ds4ci-ref", ref, cwd=repo)
    assert init.returncode == 0 and "placeholder" not in init.stdout, init.stderr
    assert sorted(p.name for p in (repo / ".github" / "workflows").iterdir()) == ["gate.yml"]
    text = (repo / ".github" / "workflows" / "gate.yml").read_text()
    owner_name, _, at = ref.partition("@")
    note = "" if at == COMMIT else " # zizmor: ignore[unpinned-uses] a tag pin, by choice (a commit pin needs no ignore)"
    assert f"    uses: {owner_name}/.github/workflows/gate.yml@{at}{note}\n" in text
    assert f'    with: {{ds4ci-ref: "{ref}"}}\n' in text and "DS4CI_REF" not in text
    assert len([line for line in text.splitlines() if not line.startswith("#")]) <= 16, text
    check = _run("config", "check", cwd=repo)
    assert check.returncode == 0 and "warning" not in check.stderr, check.stderr


@pytest.mark.parametrize(("ref", "why"), [
    ("acme/ds4ci", "expected OWNER/NAME@REF"), ("acme/ds4ci@main", "a tag like v0.1.0 or a full 40-hex commit"),
    (f"acme/ds4ci@{COMMIT[:12]}", "40-hex"), ("ds4ci@v0.1.0", "OWNER/NAME@REF"), ("acme/ds4ci@v0.1.0 x", "found"),
])
def test_init_refuses_a_malformed_ds4ci_ref_and_writes_nothing(tmp_path: Path, ref: str, why: str) -> None:
    repo = _repo(tmp_path)
    init = _run("init", "--runner", "local", "--ds4ci-ref", ref, cwd=repo)
    assert init.returncode == 2 and "--ds4ci-ref" in init.stderr and why in init.stderr, init.stderr
    assert sorted(p.name for p in repo.iterdir()) == [".git"]


def test_a_ds4ci_ref_without_workflows_is_refused(tmp_path: Path) -> None:
    init = _run("init", "--no-workflows", "--ds4ci-ref", "acme/ds4ci@v0.1.0", cwd=_repo(tmp_path))
    assert init.returncode == 2 and "no use with --no-workflows" in init.stderr
    (tmp_path / "again").mkdir()
    both = _run("init", "--no-workflows", "--copy-workflows", cwd=_repo(tmp_path / "again"))
    assert both.returncode == 2 and "--copy-workflows and --no-workflows disagree" in both.stderr


def test_config_check_and_preflight_warn_while_the_ref_is_the_placeholder(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    init = _run("init", "--simulator", "--runner", "local", "--copy-workflows", cwd=repo)
    assert init.returncode == 0, init.stderr
    assert "placeholder: DS4CI_REF in .github/workflows/gate.yml, .github/workflows/report.yml" in init.stdout
    check = _run("config", "check", cwd=repo)
    assert check.returncode == 0, check.stderr  # a warning: the gate does not depend on it
    for name in ("gate.yml", "report.yml"):
        assert f"warning: {repo}/.github/workflows/{name}: DS4CI_REF is still the placeholder" in check.stderr
    preflight = _run("preflight", "--config", "ds4ci.toml", "--runner", "local", cwd=repo)
    assert "warning: " in preflight.stderr and "gate.yml: DS4CI_REF is still the placeholder" in preflight.stderr
    # Under Actions the workflow has already refused the placeholder; preflight reads nothing of the checkout's.
    actions = _run("preflight", "--config", "ds4ci.toml", "--runner", "local", cwd=repo, GITHUB_ACTIONS="true")
    assert "DS4CI_REF" not in actions.stderr, actions.stderr


def test_the_callers_placeholder_and_disagreeing_pins_are_warned_about(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    init = _run("init", "--simulator", "--runner", "local", cwd=repo)
    assert init.returncode == 0 and "placeholder: the uses: and ds4ci-ref lines in .github/workflows/gate.yml" \
        in init.stdout, init.stdout
    check = _run("config", "check", cwd=repo)
    assert check.returncode == 0 and "gate.yml: ds4ci-ref is still the placeholder" in check.stderr, check.stderr
    gate = repo / ".github" / "workflows" / "gate.yml"
    upgraded = _run("upgrade", "--ds4ci-ref", "acme/ds4ci@v0.2.0", cwd=repo)
    assert upgraded.returncode == 0 and "calls acme/ds4ci@v0.2.0" in upgraded.stdout, upgraded.stderr
    assert _run("config", "check", cwd=repo).stderr.count("warning") == 0
    gate.write_text(gate.read_text().replace('ds4ci-ref: "acme/ds4ci@v0.2.0"', 'ds4ci-ref: "acme/ds4ci@v0.3.0"'))
    check = _run("config", "check", cwd=repo)
    assert "uses: calls acme/ds4ci@v0.2.0 but ds4ci-ref names acme/ds4ci@v0.3.0" in check.stderr, check.stderr
    gate.write_text(gate.read_text().replace('    with: {ds4ci-ref: "acme/ds4ci@v0.3.0"}\n', ""))
    check = _run("config", "check", cwd=repo)
    assert "names ds4ci only in uses:" in check.stderr, check.stderr


def test_config_check_warns_about_a_malformed_an_empty_or_a_disagreeing_ref(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    assert _run("init", "--runner", "local", "--ds4ci-ref", "acme/ds4ci@v0.1.0", "--copy-workflows",
                cwd=repo).returncode == 0
    gate = repo / ".github" / "workflows" / "gate.yml"
    text = gate.read_text()
    for value, said in [
        ("acme/ds4ci@main", "DS4CI_REF: expected OWNER/NAME@REF of ds4ci's repository"),
        ('""', "DS4CI_REF is empty, which means this repository is ds4ci itself"),
        ("acme/ds4ci@v0.2.0", "the workflows name different ds4ci"),
    ]:
        gate.write_text(text.replace('DS4CI_REF: "acme/ds4ci@v0.1.0"', f"DS4CI_REF: {value}"))
        check = _run("config", "check", cwd=repo)
        assert said in check.stderr, (value, check.stderr)
        assert "report.yml: DS4CI_REF" not in check.stderr  # report.yml still names a ds4ci
    # In ds4ci's own repository the empty value is right: ds4ci is that repository.
    own = _run("config", "check", "--config", str(ROOT / "examples" / "ds4ci.toml"), cwd=tmp_path)
    assert own.returncode == 0 and "DS4CI_REF" not in own.stderr, own.stderr


def test_config_runners_prints_each_runner_s_labels_and_role(tmp_path: Path) -> None:
    table = _run("config", "runners", "--config", str(ROOT / "examples" / "ds4ci.toml"), cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines() == ["gfx1151  gate              runs-on: self-hosted, rocm, gfx1151",
                                         "sm86     gate              runs-on: self-hosted, gpu, sm86"]
    missing = _run("config", "runners", cwd=tmp_path)
    assert missing.returncode == 2 and "ds4ci.toml does not exist" in missing.stderr
