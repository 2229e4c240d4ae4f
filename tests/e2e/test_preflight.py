"""`ds4ci preflight` end to end: real processes, fake GPU tools on PATH printing real captures.

The GPU is the only thing mocked: a fake `nvidia-smi` / `rocminfo` is a shell script that prints
a captured output (tests/data/fingerprint/) or never returns.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from paths import ROOT, TESTS
from procscan import MARKER_VARIABLE, describe, new_marker, wait_unmarked

from ds4ci.evidence import results
from ds4ci.options import config as config_mod
from ds4ci.runner.preflight import check_ready, evidence_dir_problems, stale_override_problems
from ds4ci.runner.probes import ProbeSpec, run_probes
from ds4ci.supervisor import Child, sandbox

REPO = ROOT
DATA = TESTS / "data" / "fingerprint"
SLACK_S = 10.0  # loose: machines are noisy; the point is "returns", not "fast"


def fake_tool(bindir: Path, name: str, body: str) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)


def printing(fixture: Path, expect_args: str | None = None) -> str:
    # A fake that also checks it was called with the exact arguments ds4ci promises to use.
    check = f'[ "$*" = "{expect_args}" ] || {{ echo "unexpected args: $*" >&2; exit 64; }}\n' if expect_args else ""
    return f"{check}cat '{fixture}'"


@pytest.fixture
def box(tmp_path: Path) -> dict[str, Any]:
    """An isolated runner: own PATH (no real GPU tools), own ROCm/CUDA roots, own config."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stale_dir = tmp_path / "stale"
    stale_dir.mkdir()
    stale = [stale_dir / "ds4_spec_q", stale_dir / "ds4_awidth"]
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text(
        "[runner]\nname = \"strix-1\"\nrole = \"negative-control\"\n\n[gate]\n"
        f"evidence_dir = \"{tmp_path / 'evidence'}\"\n"
        f"stale_override_files = [{', '.join(json.dumps(str(p)) for p in stale)}]\n",
        encoding="utf-8",
    )
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "ROCM_PATH": str(tmp_path / "no-rocm"),
        "CUDA_HOME": str(tmp_path / "no-cuda"),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "LANG": "C.UTF-8",
    }
    return {"bin": bindir, "config": cfg, "env": env, "stale": stale, "tmp": tmp_path}


def preflight(box: dict[str, Any], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    argv = [sys.executable, "-c", "from ds4ci.cli import main; main()", "preflight", "--config", str(box["config"]), *args]
    started = time.monotonic()
    proc = subprocess.run(argv, env=box["env"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    return proc, time.monotonic() - started


def fingerprint_validator() -> jsonschema.Draft202012Validator:
    full = results.schema()
    return jsonschema.Draft202012Validator({**full["properties"]["fingerprint"], "$defs": full["$defs"]})


def strix_halo_rocminfo(tmp: Path) -> Path:
    gfx = DATA / "gfx1151"
    out = tmp / "rocminfo.txt"
    out.write_text(
        (gfx / "rocminfo-jax-234-header.txt").read_text()
        + (gfx / "rocminfo-ds4-475-agent2.txt").read_text(),
        encoding="utf-8",
    )
    return out


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state  # killed, waiting for init to reap it


# --- the deadline ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param('echo $$ > "$PIDFILE"; exec sleep 100000', id="sleeps-forever"),
        pytest.param('echo $$ > "$PIDFILE"; trap "" TERM HUP INT; while :; do sleep 1; done', id="ignores-sigterm"),
    ],
)
def test_hung_rocminfo_is_abandoned_at_the_deadline_and_reported(box: dict[str, Any], body: str) -> None:
    pidfile = box["tmp"] / "rocminfo.pid"
    box["env"]["PIDFILE"] = str(pidfile)
    marker = new_marker()
    box["env"][MARKER_VARIABLE] = marker
    fake_tool(box["bin"], "rocminfo", body)
    fake_tool(box["bin"], "nvidia-smi", printing(DATA / "nvidia-h200" / "nvidia-smi-query-noheader.csv"))
    proc, elapsed = preflight(box, "--json", "--deadline", "2")
    assert proc.returncode == 3, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ready"] is False
    fp = out["fingerprint"]
    fingerprint_validator().validate(fp)
    assert fp["probes"]["rocminfo"] == "timeout"
    assert fp["health"]["status"] == "timeout"
    assert any("rocminfo" in p and "deadline" in p for p in out["problems"])
    assert fp["gpus"][0]["name"] == "NVIDIA H200"  # what answered is still reported
    assert "rocminfo" in proc.stderr  # the diagnosis reaches the job log
    assert elapsed < 2 + SLACK_S
    assert pidfile.read_text().strip()  # it did start
    left = wait_unmarked(marker)
    assert not left, describe(left)  # it and everything it started got SIGKILL


def test_many_hung_probes_share_one_deadline() -> None:
    # Sequentially, 8 probes x 2 s would take 16 s or more; concurrently about 2 s.
    specs = [ProbeSpec(f"stuck{i}", argv=("sleep", "100000")) for i in range(8)]
    started = time.monotonic()
    out = run_probes(specs, 2.0)
    assert time.monotonic() - started < 2.0 + SLACK_S
    assert {r.status for r in out.values()} == {"timeout"}


def test_a_probe_that_survives_sigkill_is_abandoned_not_waited_for() -> None:
    # A D-state process ignores SIGKILL; that cannot be produced here, so the kill step is
    # replaced by one that the "kernel" does not honour, and the test cleans up afterwards.
    survivors: list[Child] = []
    started = time.monotonic()
    out = run_probes(
        [ProbeSpec("rocminfo", argv=("sleep", "100000"))], 0.5, kill_grace_s=0.2, killer=survivors.append
    )
    try:
        result = out["rocminfo"]
        assert result.status == "timeout"
        assert "abandoned" in result.detail
        assert "survived SIGKILL" in result.detail
        assert time.monotonic() - started < 0.5 + SLACK_S
        assert len(survivors) == 1 and not process_gone(survivors[0].pid)
    finally:
        for child in survivors:
            child.kill()


def test_output_read_back_is_bounded(tmp_path: Path) -> None:
    out = run_probes([ProbeSpec("chatty", argv=("head", "-c", "300000", "/dev/zero"))], 10.0, max_output_bytes=1000)
    assert out["chatty"].status == "ok"
    assert out["chatty"].truncated
    assert len(out["chatty"].stdout) == 1000


# --- fake GPU tools printing real captures --------------------------------------------------


def test_h200_runner_is_ready_and_fingerprinted(box: dict[str, Any]) -> None:
    h200 = DATA / "nvidia-h200"
    fake_tool(
        box["bin"],
        "nvidia-smi",
        printing(
            h200 / "nvidia-smi-query-noheader.csv",
            "--query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader,nounits",
        ),
    )
    fake_tool(box["bin"], "nvcc", printing(h200 / "nvcc-version.txt", "--version"))
    proc, _ = preflight(box, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"runner", "ready", "problems", "fingerprint", "sandbox"}
    assert out["sandbox"]["available"] == (sandbox.refusal() is None)
    assert (out["runner"], out["ready"], out["problems"]) == ("strix-1", True, [])
    fp = out["fingerprint"]
    fingerprint_validator().validate(fp)
    assert fp["gpus"] == [
        {"vendor": "nvidia", "name": "NVIDIA H200", "arch": "sm_90", "memory_mib": 143771, "driver": "580.159.04"}
    ]
    assert fp["toolchain"]["cuda_toolkit"] == "13.0.88"
    assert fp["probes"]["rocminfo"] == "missing"
    assert fp["probes"]["nvcc"] == "ok"


def test_gfx1151_runner_found_under_rocm_path_not_on_path(box: dict[str, Any]) -> None:
    # ROCm does not put /opt/rocm/bin on PATH by default; the tool must be found there too.
    rocm_bin = Path(box["env"]["ROCM_PATH"]) / "bin"
    fake_tool(rocm_bin, "rocminfo", printing(strix_halo_rocminfo(box["tmp"]), ""))
    fake_tool(rocm_bin, "hipconfig", printing(DATA / "hip" / "hipconfig-full-rocm-6.2-hip-3521.txt", "--full"))
    proc, _ = preflight(box, "--json", "--runner", "gfx1151-box")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["runner"] == "gfx1151-box"
    fp = out["fingerprint"]
    fingerprint_validator().validate(fp)
    assert [(g["vendor"], g["arch"], g["name"]) for g in fp["gpus"]] == [("amd", "gfx1151", "AMD Radeon 8060S Graphics")]
    assert fp["toolchain"]["hip"] == "6.2.41133-dd7f95766"
    assert fp["toolchain"]["hip_clang"].startswith("AMD clang version 18.0.0git")
    assert fp["health"]["status"] == "ok"


def test_failing_gpu_tool_makes_runner_unhealthy(box: dict[str, Any]) -> None:
    fake_tool(box["bin"], "nvidia-smi", 'echo "simulated driver failure" >&2; exit 9')
    proc, _ = preflight(box, "--json")
    assert proc.returncode == 3
    out = json.loads(proc.stdout)
    assert out["fingerprint"]["health"]["status"] == "unhealthy"
    assert out["fingerprint"]["probes"]["nvidia-smi"] == "failed"
    assert any("simulated driver failure" in p for p in out["problems"])


def test_no_gpu_tools_is_recorded_not_a_failure(box: dict[str, Any]) -> None:
    proc, _ = preflight(box, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["fingerprint"]["health"]["status"] == "unknown"
    assert out["fingerprint"]["probes"]["nvidia-smi"] == "missing"
    assert out["fingerprint"]["probes"]["rocminfo"] == "missing"
    assert out["ready"] is True


def test_stale_override_file_makes_runner_not_ready(box: dict[str, Any]) -> None:
    box["stale"][0].write_text("3\n")
    proc, _ = preflight(box, "--json")
    assert proc.returncode == 3
    out = json.loads(proc.stdout)
    assert out["ready"] is False
    (problem,) = out["problems"]
    assert str(box["stale"][0]) in problem and "'3'" in problem


def test_human_table_by_default_and_progress_on_stderr(box: dict[str, Any]) -> None:
    box["stale"][1].write_text("2")
    proc, _ = preflight(box)
    assert proc.returncode == 3
    assert "ready      NO" in proc.stdout
    assert str(box["stale"][1]) in proc.stdout
    assert "ds4ci preflight: probing" in proc.stderr
    assert "ds4ci preflight: probing" not in proc.stdout


def test_bad_deadline_is_a_usage_error(box: dict[str, Any]) -> None:
    proc, _ = preflight(box, "--deadline", "0")
    assert proc.returncode == 2
    assert "--deadline" in proc.stderr


# --- check_ready (the part the gate calls) --------------------------------------------------


def gate_config(tmp_path: Path) -> config_mod.GateConfig:
    files = {}
    for name in ("server", "target.gguf", "draft.gguf", "prompt.txt"):
        path = tmp_path / name
        path.write_bytes(b"x")
        files[name] = path
    files["server"].chmod(0o755)
    sha = "0" * 64
    cfg = tmp_path / "gate.toml"
    cfg.write_text(
        "[gate]\n"
        f'server_bin = "{files["server"]}"\ntarget = "{files["target.gguf"]}"\ntarget_sha256 = "{sha}"\n'
        f'draft = "{files["draft.gguf"]}"\ndraft_sha256 = "{sha}"\n'
        f'prompts = [{{file = "{files["prompt.txt"]}", sha256 = "{sha}"}}]\n'
        f'evidence_dir = "{tmp_path / "evidence" / "runs"}"\n'
        f'stale_override_files = ["{tmp_path / "ds4_spec_q"}"]\n',
        encoding="utf-8",
    )
    return config_mod.load(cfg, {})


def test_check_ready_passes_and_creates_nothing(tmp_path: Path) -> None:
    cfg = gate_config(tmp_path)
    assert check_ready(cfg) == []
    assert not (tmp_path / "evidence").exists()


def test_check_ready_reports_model_removed_after_staging(tmp_path: Path) -> None:
    cfg = gate_config(tmp_path)
    (tmp_path / "draft.gguf").unlink()
    (tmp_path / "server").chmod(0o644)
    problems = check_ready(cfg)
    assert any("draft" in p and "missing" in p for p in problems)
    assert any("not executable" in p for p in problems)
    assert len(problems) == 2


def test_check_ready_reports_stale_override_and_bad_evidence_dir(tmp_path: Path) -> None:
    cfg = gate_config(tmp_path)
    (tmp_path / "ds4_spec_q").write_text("4")
    (tmp_path / "evidence").write_text("a file where a directory must go")
    problems = check_ready(cfg)
    assert any("ds4_spec_q" in p for p in problems)
    assert any("evidence dir" in p for p in problems)


def test_evidence_dir_existing_writable_leaves_no_trace(tmp_path: Path) -> None:
    assert evidence_dir_problems(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_stale_override_symlink_counts_even_if_dangling(tmp_path: Path) -> None:
    link = tmp_path / "ds4_awidth"
    link.symlink_to(tmp_path / "nowhere")
    (problem,) = stale_override_problems([link])
    assert str(link) in problem
