"""A new maintainer's first steps, walked with the real CLI as a subprocess in temporary git repositories.

`ds4ci init` then `ds4ci gate --config` on the simulator (the README's commands, verbatim), `config
check` offline, runner GPU expectations against a stand-in nvidia-smi that prints the real H200's
row, the job summary, the evidence folder, `python -m ds4ci` and every --help's exit codes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import BIN, DS4CI, Workspace

from ds4ci.commands import caller

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
H200_SMI = ROOT / "tests" / "data" / "fingerprint" / "nvidia-h200" / "nvidia-smi-query-noheader.csv"


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    # As a user's shell has it: no harness variable either (DS4CI_SANDBOX_*: the suite's view of its own Python),
    # so what the sandbox shows the simulator is what `ds4ci init` arranged.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DFLASH_", "LUCE_", "DS4SIM_", "DS4_", "GITHUB_", "RUNNER_", "DS4CI_SANDBOX_"))}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "XDG_CACHE_HOME": str(tmp / "cache"),
                "HOME": str(tmp / "home")})
    env.update(extra)
    return env


def git_init(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def ds4ci(*args: str, cwd: Path, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def readme_quickstart_commands() -> list[str]:
    """The shell commands of the README's "First run on the simulator" block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"### First run on the simulator.*?```sh\n(.*?)```", text, re.DOTALL)
    assert block is not None, "README.md lost its 'First run on the simulator' block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_first_run_works_verbatim(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    commands = readme_quickstart_commands()
    assert any(c.startswith("ds4ci init") for c in commands) and any("gate --config" in c for c in commands)
    said = []
    for command in commands:
        proc = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
        said.append(proc)
    assert "PASS" in proc.stdout
    # The evidence landed in the checkout, ignored: `git add -A` stages none of it.
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    staged = subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--name-only"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert not [s for s in staged if s.startswith(("ds4ci-evidence", "ds4ci-sim"))], staged
    assert {"ds4ci.toml", ".gitignore", ".github/workflows/gate.yml"} <= set(staged)
    assert ".github/workflows/report.yml" not in staged
    # The workflow is the short caller of ds4ci's own, its two pins the placeholder init named.
    assert (repo / ".github" / "workflows" / "gate.yml").read_text() == caller.render(None)
    # init named that placeholder, and config check points it out while it is one (a warning: exit 0 above).
    assert "placeholder: the uses: and ds4ci-ref lines in .github/workflows/gate.yml" in said[0].stdout
    assert "gate.yml: ds4ci-ref is still the placeholder" in said[1].stderr, said[1].stderr


def assert_shipped_but_for_the_ref(written: Path, value: str) -> None:
    """``written`` is the workflow this ds4ci ships, line for line, except its DS4CI_REF line, which holds ``value``."""
    shipped = (ROOT / ".github" / "workflows" / written.name).read_text().split("\n")
    lines = written.read_text().split("\n")
    assert len(lines) == len(shipped)
    differ = [(a, b) for a, b in zip(shipped, lines, strict=True) if a != b]
    assert len(differ) == 1 and differ[0][0] == '  DS4CI_REF: ""', differ
    assert differ[0][1].startswith(f'  DS4CI_REF: "{value}'), differ


def test_init_pins_files_it_can_read_and_explains_the_ones_it_cannot(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    ws = Workspace.create(tmp_path / "files")
    proc = ds4ci("init", "--runner", "gfx1151", "--runner", "sm86", "--target", str(ws.target),
                 "--prompt-file", str(ws.prompts[0]), cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    text = (repo / "ds4ci.toml").read_text()
    import hashlib
    assert f'target_sha256 = "{hashlib.sha256(ws.target.read_bytes()).hexdigest()}"' in text
    assert 'draft_sha256 = "TODO' in text
    runs_on = "   # the gate job's runs-on"
    assert f'[runners.gfx1151]\nlabels = ["self-hosted", "gfx1151"]{runs_on}\ntarget_device = "hip:0"\ngpu = "gfx1151"' in text
    assert f'[runners.sm86]\nlabels = ["self-hosted", "sm86"]{runs_on}\ntarget_device = "cuda:0"\ngpu = "sm_86"' in text
    # the gate service is the normal path: the next steps say how each runner keeps its key from every job
    assert "sudo ds4ci service install --runner gfx1151 --runner sm86 --trusted-repo" in proc.stdout, proc.stdout
    assert "DS4CI_SERVICE_SOCKET=/run/ds4ci/gate.sock" in proc.stdout
    check = ds4ci("config", "check", cwd=repo, env=env)
    assert check.returncode == 2
    assert "draft_sha256: not pinned yet" in check.stderr and "sha256sum" in check.stderr
    preflight = ds4ci("preflight", "--config", "ds4ci.toml", "--runner", "gfx1151", cwd=repo,
                      env={**env, "DS4_MODEL_DIR": str(tmp_path / "models")})
    assert preflight.returncode == 2 and "not pinned yet" in preflight.stderr
    again = ds4ci("init", cwd=repo, env=env)
    assert again.returncode == 2 and "--force" in again.stderr
    assert (repo / "ds4ci.toml").read_text() == text


def test_config_check_is_offline_and_strict(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    sha = "a" * 64
    good = (
        "[gate]\nserver_bin = \"build/bin/dflash_server\"\n"
        f'target = "${{DS4_MODEL_DIR}}/t.gguf"\ntarget_sha256 = "{sha}"\n'
        f'draft = "${{DS4_MODEL_DIR}}/d.gguf"\ndraft_sha256 = "{sha}"\n'
        f'prompts = [{{file = "p.txt", sha256 = "{sha}"}}]\nwidths = [2, 3, 4]\n'
        '[runners.gfx1151]\ntarget_device = "hip:0"\ngpu = "gfx1151"\n'
        '[runners.sm86]\nrole = "negative-control"\nnegative_control_for = "gfx1151"\n'
    )
    (tmp_path / "ds4ci.toml").write_text(good)
    proc = ds4ci("config", "check", "--config", "ds4ci.toml", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "gfx1151: gate: widths 2,3,4" in proc.stdout and "gpu gfx1151" in proc.stdout
    assert "sm86: negative-control" in proc.stdout and "${DS4_MODEL_DIR} not set here" in proc.stdout
    for broken, said in [
        (good.replace("widths = [2, 3, 4]", 'widths = "2,3,4"'), "widths = [2, 3, 4]"),
        (good.replace("widths = [2, 3, 4]", "widths = [2, 3, 4]\nwidht = 3"), "widht"),
        (good.replace(f'target_sha256 = "{sha}"', 'target_sha256 = "abc"'), "64 hexadecimal"),
        (good.replace('gpu = "gfx1151"', "gpu = 1151"), "GPU architecture or name"),
        (good.replace('target_device = "hip:0"', 'target_device = "hip"'), "device like hip:0"),
    ]:
        (tmp_path / "ds4ci.toml").write_text(broken)
        bad = ds4ci("config", "check", "--config", "ds4ci.toml", cwd=tmp_path, env=env)
        assert bad.returncode == 2 and said in bad.stderr, (said, bad.stderr)
    # Where the arms run is said per runner.
    placed = good.replace('[runners.sm86]', '[runners.h200]\ntarget_device = "cuda:0"\ndevices = ["cuda:0", "cuda:1"]\n'
                          'parallel = 2\n[runners.sm86]')
    (tmp_path / "ds4ci.toml").write_text(placed)
    proc = ds4ci("config", "check", "--config", "ds4ci.toml", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "h200: gate: widths 2,3,4, 1 prompt(s), target_device cuda:0, arms on cuda:0,cuda:1, 2 arms per device" in proc.stdout
    # The shipped example is valid as it stands (its pins are placeholders of the right form).
    example = ds4ci("config", "check", "--config", str(ROOT / "examples" / "ds4ci.toml"), cwd=tmp_path, env=env)
    assert example.returncode == 0 and "gfx1151: gate" in example.stdout, example.stderr
    # The gate refuses the same string widths (the flag takes "2,3,4", the file an array).
    ws = Workspace.create(tmp_path / "ws")
    (tmp_path / "ws" / "ds4ci.toml").write_text('[gate]\nwidths = "2,3,4"\n')
    run = ws.gate("--config", str(tmp_path / "ws" / "ds4ci.toml"), widths=None)
    assert run.code == 2 and "found the string '2,3,4'" in run.stderr


def test_config_check_refuses_what_config_runners_and_merge_check_refuse(tmp_path: Path) -> None:
    """One file, three readers: what `config runners` (the workflows' matrix) and `merge-check` refuse, `config
    check` refuses too, in their words; the same file with a runner named in both places passes all three."""
    env = clean_env(tmp_path)
    sha = "a" * 64
    gate = ("[gate]\nserver_bin = \"build/bin/dflash_server\"\n"
            f'target = "t.gguf"\ntarget_sha256 = "{sha}"\ndraft = "d.gguf"\ndraft_sha256 = "{sha}"\n'
            f'prompts = [{{file = "p.txt", sha256 = "{sha}"}}]\nwidths = [2, 3, 4]\n')
    config = tmp_path / "ds4ci.toml"
    config.write_text(gate + "[merge]\nrunners = []\n")
    check = ds4ci("config", "check", cwd=tmp_path, env=env)
    matrix = ds4ci("config", "runners", cwd=tmp_path, env=env)
    merge = ds4ci("merge-check", "--pr", "1", "--repo", "acme/engine", cwd=tmp_path, env=env)
    assert (check.returncode, matrix.returncode, merge.returncode) == (2, 2, 2), (check, matrix, merge)
    no_runner = "names no runner; expected a [runners.<name>] table"
    no_gate_runner = "name at least one gate runner"
    assert no_runner in matrix.stderr and no_gate_runner in merge.stderr
    assert f"config runners refuses it: {config.name}: {no_runner}" in check.stderr, check.stderr
    assert f"merge-check refuses it: {no_gate_runner}" in check.stderr and "valid" not in check.stdout
    config.write_text(gate + '[runners.gfx1151]\ntarget_device = "hip:0"\n[merge]\nrunners = []\n')
    check = ds4ci("config", "check", cwd=tmp_path, env=env)
    assert check.returncode == 2 and "config runners refuses" not in check.stderr, check.stderr
    assert f"merge-check refuses it: {no_gate_runner}" in check.stderr
    config.write_text(gate + '[runners.gfx1151]\ntarget_device = "hip:0"\n[merge]\nrunners = ["gfx1151"]\n')
    assert ds4ci("config", "check", cwd=tmp_path, env=env).returncode == 0
    assert ds4ci("config", "runners", cwd=tmp_path, env=env).returncode == 0


def test_the_first_error_when_no_runner_matches_suggests_runner(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--no-workflows", cwd=repo, env=env).returncode == 0
    proc = ds4ci("gate", "--config", "ds4ci.toml", cwd=repo, env=env)
    assert proc.returncode == 2
    assert "has no [runners." in proc.stderr and "pass --runner NAME" in proc.stderr and "local" in proc.stderr


def fake_gpu_path(tmp_path: Path) -> str:
    tools = tmp_path / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    # The GPU query prints the real H200's row; the busy check's process query finds no process.
    smi.write_text('#!/bin/sh\ncase "$*" in *--query-compute-apps*) exit 0;; esac\n'
                   f"cat {shlex.quote(str(H200_SMI))}\n")
    smi.chmod(0o755)
    return f"{tools}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.parametrize(("gpu", "code", "said"), [
    ('"gfx1151"', 3, "must have a GPU 'gfx1151' (runners.box.gpu), but this machine has NVIDIA H200 (sm_90)"),
    ('["gfx1151", "H200"]', 0, None),
    ('"sm_90"', 0, None),
])
def test_runner_gpu_is_checked_by_preflight_and_the_gate(tmp_path: Path, gpu: str, code: int, said: str | None) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    env["PATH"] = fake_gpu_path(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "box", "--no-workflows", cwd=repo, env=env).returncode == 0
    config = repo / "ds4ci.toml"
    config.write_text(config.read_text() + f"gpu = {gpu}\n")
    pre = ds4ci("preflight", "--config", "ds4ci.toml", "--runner", "box", cwd=repo, env=env)
    assert pre.returncode == code, pre.stdout + pre.stderr
    gate = ds4ci("gate", "--config", "ds4ci.toml", "--runner", "box", "--widths", "2", cwd=repo, env=env)
    assert gate.returncode == code, gate.stdout + gate.stderr
    if said is not None:
        assert said in pre.stdout
        assert said in gate.stdout
        # Checked before any server started.
        assert "server pid" not in gate.stderr


def test_no_gpu_at_all_is_a_clear_failure(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "gfx1151", "--no-workflows", cwd=repo, env=env).returncode == 0
    config = repo / "ds4ci.toml"
    config.write_text(config.read_text().replace('# gpu = "gfx1151"', 'gpu = "gfx1151"'))
    gate = ds4ci("gate", "--config", "ds4ci.toml", "--runner", "gfx1151", "--widths", "2", cwd=repo, env=env)
    if "this machine has" in gate.stdout:
        pytest.skip("this machine has a GPU tool that reports a GPU")
    assert gate.returncode == 3
    assert "must have a GPU 'gfx1151'" in gate.stdout and "no GPU was found" in gate.stdout


def test_the_gate_writes_the_job_summary_and_warns_about_unignored_evidence(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--no-workflows", cwd=repo, env=env).returncode == 0
    (repo / ".gitignore").write_text("/ds4ci-sim/\n")  # the evidence entry removed
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    proc = ds4ci("gate", "--config", "ds4ci.toml", "--runner", "local", "--widths", "2", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "job summary" in text and "local" in text
    # The gate's own evidence folder ignores itself (a .gitignore holding "*"): no warning, nothing to stage.
    assert "inside the git checkout" not in proc.stderr
    assert (repo / "ds4ci-evidence" / ".gitignore").read_text().splitlines()[-1] == "*"
    untracked = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
                               capture_output=True, text=True, check=True).stdout
    assert "ds4ci-evidence" not in untracked, untracked
    # A folder that holds anything else is not ours to ignore: the gate warns instead.
    mine = repo / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("kept\n")
    warned = ds4ci("gate", "--config", "ds4ci.toml", "--runner", "local", "--widths", "2", "--evidence-dir", "mine",
                   cwd=repo, env=env)
    assert warned.returncode == 0 and "inside the git checkout" in warned.stderr and ".gitignore" in warned.stderr
    assert not (mine / ".gitignore").exists()


def test_python_m_ds4ci_is_the_cli(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ds4ci", "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("ds4ci ")
    gate = subprocess.run([sys.executable, "-m", "ds4ci", "gate", "--widths", "x"], capture_output=True, text=True,
                          check=False, cwd=tmp_path)
    assert gate.returncode == 2


COMMANDS = [
    ["gate"], ["demo"], ["selftest"], ["report"], ["verify"], ["publish"], ["preflight"], ["revisions"],
    ["dispatch-check"], ["merge-check"], ["hash-cache", "add"], ["init"], ["config", "check"], ["config", "runners"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_help_states_its_exit_codes(command: list[str], tmp_path: Path) -> None:
    proc = ds4ci(*command, "--help", cwd=tmp_path, env=clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    assert re.search(r"Exit (codes?: )?0", flat, re.IGNORECASE), flat[:600]


def test_the_wheel_ships_templates_schema_and_workflows(tmp_path: Path) -> None:
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--sdist", "--no-isolation", "--outdir",
                            str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600, check=False)
    if build.returncode != 0 and "No module named build" in build.stderr:
        pytest.skip("the build package is not installed (pip install build)")
    assert build.returncode == 0, build.stderr[-2000:]
    import tarfile
    import zipfile
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("ds4ci/templates/comment.md.j2", "ds4ci/evidence/schema/result-v1.json", "ds4ci/workflows/gate.yml",
                   "ds4ci/workflows/report.yml", "ds4ci/__main__.py", "ds4ci/py.typed",
                   "ds4ci/mutants/lucebox-ds4-reference-exact.toml", "ds4ci/commands/checklist.md"):
        assert needed in names, needed
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "ds4ci = ds4ci.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {m.split("/", 1)[1] for m in archive.getnames() if "/" in m}
    assert {"templates/comment.md.j2", ".github/workflows/gate.yml", "CHANGELOG.md"} <= members
    # Installed on its own (this interpreter supplies the dependencies), the CLI runs from the wheel's files
    # and init finds the workflows packaged in it.
    target = tmp_path / "installed"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                              str(target), str(wheel)], capture_output=True, text=True, timeout=600, check=False)
    assert install.returncode == 0, install.stderr
    # -S: without site processing this checkout's editable install is not on the path; the dependencies are.
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    env = {**clean_env(tmp_path), "PYTHONPATH": f"{target}{os.pathsep}{deps}"}
    python = [sys.executable, "-S"]
    where = subprocess.run([*python, "-c", "import ds4ci; print(ds4ci.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(target)), where
    assert subprocess.run([*python, "-m", "ds4ci", "--help"], env=env, cwd=tmp_path, capture_output=True,
                          check=False).returncode == 0
    repo = git_init(tmp_path / "engine")
    init = subprocess.run([*python, "-m", "ds4ci", "init", "--runner", "gfx1151", "--copy-workflows"], cwd=repo,
                          env=env, capture_output=True, text=True, check=False)
    assert init.returncode == 0, init.stderr
    assert "**The GitHub side, in the order you set it up**" in init.stdout  # the packaged checklist
    for name in ("gate.yml", "report.yml"):
        assert_shipped_but_for_the_ref(repo / ".github" / "workflows" / name, "TODO: OWNER/ds4ci@vX.Y.Z")


def test_a_run_that_never_started_an_arm_reads_not_run_and_its_reproduce_is_whole(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(draft_sha256="f" * 64, widths="2", results_out=tmp_path / "r.json")
    assert run.code == 3 and "target-only: not run;" in run.stdout, run.stdout
    assert "deterministic" not in run.stdout
    (tmp_path / "kept.json").write_text(json.dumps(run.results))
    report = ds4ci("report", str(tmp_path / "kept.json"), "--format", "comment", cwd=tmp_path, env=clean_env(tmp_path))
    assert report.returncode == 0, report.stderr
    assert run.results is not None and len(run.results["reproduce"]) > 600  # longer than the old inline cut
    assert run.results["reproduce"] in report.stdout
