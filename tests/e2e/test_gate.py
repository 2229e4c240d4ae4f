"""`ds4ci gate` end to end: real CLI process, real server processes on loopback, real evidence."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
from pathlib import Path

import pytest
from gatekit import FOREIGN_SERVER, GateRun, Workspace, evidence_listing, processes_mentioning

from ds4ci.evidence import results
from ds4ci.judging.protocol import scan_log


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.create(tmp_path)


def test_simulator_passes_at_three_widths_with_complete_evidence(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path, prompts=2)
    run = ws.gate()
    assert run.code == 0, run.stdout + run.stderr
    doc = run.results
    assert doc is not None
    results.validate(doc)
    assert doc["verdict"] == "pass" and doc["exit_code"] == 0
    assert [w["q"] for w in doc["widths"]] == [2, 3, 4]
    for width in doc["widths"]:
        for cell in width["prompts"]:
            assert cell["parity_requests"] == cell["requests"] == 2
            assert cell["rejection_observed"] and cell["full_snap_claimed"] and cell["banner_claimed"]
            assert cell["rejected_drafts"] == cell["offered"] - cell["matched"] > 0
            assert cell["matched"] < cell["offered"]
    # 1 + W server starts: one target-only server serves every width.
    assert [(s["arm"], s["q"]) for s in doc["timings"]["servers"]] == [
        ("target-only", None), ("reference-exact", 2), ("reference-exact", 3), ("reference-exact", 4),
    ]
    final = Path(doc["evidence"]["dir"])
    assert final.parent == ws.root / "evidence" / "runs"
    assert evidence_listing(ws.root / "evidence")["attempts"] == []
    # The manifest digest in results.json seals every evidence file.
    manifest = final / "manifest.json"
    assert hashlib.sha256(manifest.read_bytes()).hexdigest() == doc["evidence"]["manifest_sha256"]
    for entry in json.loads(manifest.read_text())["evidence"]:
        assert hashlib.sha256((final / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    assert {i["role"] for i in json.loads(manifest.read_text())["inputs"]} == {
        "server_bin", "target", "draft", "prompt0", "prompt1",
    }
    assert json.loads((final / "results.json").read_text()) == doc


def test_requests_are_interleaved_across_prompts(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path, prompts=2)
    run = ws.gate(widths="2")
    assert run.code == 0, run.stderr
    assert run.results is not None
    log = Path(run.results["evidence"]["dir"]) / "servers" / "q2" / "stderr.log"
    traces = [r.trace for r in scan_log(log, "stderr", 100).records if r.trace is not None]
    a, b = traces[0].ids, traces[1].ids
    assert a != b
    assert [t.ids for t in traces] == [a, b, a, b]


def test_arms_differ_only_in_activation_and_inherited_policy_is_stripped(ws: Workspace) -> None:
    env = ws.env(
        DFLASH_DS4_FUSED_VERIFY="1", LUCE_DS4_FUSED_VERIFY="1", DFLASH_DS4_SPEC_Q="9", LUCE_MMVQ_MAX_NCOLS="1",
        DFLASH_MOE_X="1", GGML_CUDA_BATCH_PEER_COPIES="1",
    )
    run = ws.gate(env=env)
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    pol = run.results["policy"]
    assert {"DFLASH_DS4_FUSED_VERIFY", "LUCE_DS4_FUSED_VERIFY", "DFLASH_DS4_SPEC_Q", "LUCE_MMVQ_MAX_NCOLS",
            "DFLASH_MOE_X", "GGML_CUDA_BATCH_PEER_COPIES"} <= set(pol["removed"])
    assert pol["arms"]["target-only"] == pol["common"]
    assert pol["common"]["LUCE_MMVQ_MAX_NCOLS"] == "4"
    changed = {entry.split(" ", 1)[0] for entry in pol["difference"]}
    # Activation under both prefixes by default, so older (DFLASH_) and newer (LUCE_) builds both see it.
    assert changed == {
        f"{prefix}DS4_{name}" for prefix in ("DFLASH_", "LUCE_") for name in ("SPEC", "DRAFT", "SPEC_Q", "SPEC_REFERENCE_EXACT")
    }
    for q in (2, 3, 4):
        spec = pol["arms"][f"reference-exact q={q}"]
        assert {k: v for k, v in spec.items() if k in pol["common"]} == pol["common"]


def test_foreign_server_verdicts_and_exit_codes(ws: Workspace) -> None:
    ws.server = FOREIGN_SERVER
    good = ws.gate(widths="2,3")
    assert good.code == 0, good.stdout + good.stderr
    assert good.results is not None and good.results["server"] == {"name": "foreign", "version": "9.9"}
    bad = ws.gate(widths="2", env=ws.env(FOREIGN_BEHAVIOUR="mismatch"))
    assert bad.code == 1
    assert bad.results is not None
    assert bad.results["widths"][0]["prompts"][0]["mismatch"]["position"] == 5
    crash = ws.gate(widths="2", env=ws.env(FOREIGN_BEHAVIOUR="crash-on-request"))
    assert crash.code == 3
    assert "exited with code 9" in crash.reasons()


def test_pin_mismatch_is_an_error_and_starts_no_server(ws: Workspace) -> None:
    run = ws.gate(draft_sha256="0" * 64)
    assert run.code == 3
    assert "draft" in run.reasons() and "0" * 64 in run.reasons()
    final = Path(run.results["evidence"]["dir"]) if run.results else None
    assert final is not None and final.parent.name == "failed"
    assert not (final / "servers").exists()
    assert processes_mentioning(str(ws.root)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"widths": "1,2"}, ">= 2"),
        ({"widths": "2,2"}, "listed twice"),
        ({"widths": "2,x"}, "comma-separated"),
        ({"widths": "2,3,4", "mmvq_max_ncols": 3}, "mmvq_max_ncols (3) must be >="),
        ({"max_tokens": 1}, ">= 2"),
        ({"target_sha256": "abc"}, "64 hexadecimal"),
    ],
)
def test_usage_errors_exit_2_before_anything_runs(ws: Workspace, overrides: dict[str, object], message: str) -> None:
    run = ws.gate(**overrides)
    assert run.code == 2, run.stderr
    assert message in run.stderr
    assert not (ws.root / "evidence").exists()


def test_a_missing_pinned_file_is_not_ready_like_a_wrong_pin(ws: Workspace) -> None:
    """The runner's files, not the config's form: exit 3 (no verdict), as a wrong pin and preflight's "not ready",
    with the attempt's evidence kept; a path given as a flag that is not there is a usage error (exit 2)."""
    config = ws.root / "missing-target.toml"
    config.write_text(f'[gate]\ntarget = "/nonexistent/target.gguf"\ntarget_sha256 = "{"b" * 64}"\n')
    run = ws.gate(config=config, target=None, target_sha256=None)
    assert run.code == 3, run.stderr
    assert "target file /nonexistent/target.gguf does not exist" in run.stderr and "not ready" in run.stderr
    assert run.results is not None and (ws.root / "evidence" / "failed").is_dir()
    flag = ws.gate(target="/nonexistent/target.gguf")
    assert flag.code == 2 and "--target /nonexistent/target.gguf: expected the target file" in flag.stderr


def test_prompt_pairs_must_match(ws: Workspace) -> None:
    run = ws.gate("--prompt-file", str(ws.prompts[0]), prompt_file=None)
    assert run.code == 2
    assert "paired in order" in run.stderr


def test_stale_override_file_refuses_to_run(ws: Workspace) -> None:
    stale = ws.root / "ds4_spec_q"
    stale.write_text("3\n")
    config = ws.root / "ds4ci.toml"
    config.write_text(f'[gate]\nstale_override_files = ["{stale}"]\n')
    run = ws.gate("--config", str(config))
    assert run.code == 3
    assert "stale override" in run.reasons() and str(stale) in run.reasons()
    assert run.results is not None and run.results["timings"]["servers"] == []


def test_config_file_paths_are_relative_to_the_file_and_flags_override(ws: Workspace) -> None:
    config = ws.root / "ds4ci.toml"
    config.write_text(
        "[gate]\n"
        f'server_bin = "{ws.server.name}"\n'
        f'target = "models/{ws.target.name}"\ntarget_sha256 = "{hashlib.sha256(ws.target.read_bytes()).hexdigest()}"\n'
        f'draft = "models/{ws.draft.name}"\ndraft_sha256 = "{hashlib.sha256(ws.draft.read_bytes()).hexdigest()}"\n'
        f'prompts = [{{file = "models/{ws.prompts[0].name}", '
        f'sha256 = "{hashlib.sha256(ws.prompts[0].read_bytes()).hexdigest()}"}}]\n'
        'evidence_dir = "ev"\nwidths = [2, 3, 4]\nmax_tokens = 80\n'
    )
    out = ws.root / "r.json"
    proc = subprocess.run(
        [str(Path(__import__("sys").executable).parent / "ds4ci"), "gate", "--config", str(config), "--widths", "3",
         "--results-out", str(out), "--runner", "cfg"],
        capture_output=True, text=True, env=ws.env(), cwd="/", timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["settings"]["widths"] == [3] and doc["settings"]["max_tokens"] == 80
    assert Path(doc["evidence"]["dir"]).parent == ws.root / "ev" / "runs"


def test_reruns_and_concurrent_runs_never_overwrite_evidence(ws: Workspace) -> None:
    first = ws.gate(widths="2")
    assert first.code == 0
    runs: list[GateRun] = []

    def go(i: int) -> None:
        runs.append(ws.gate(widths="2", results_out=ws.root / f"r{i}.json"))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.code for r in runs] == [0, 0]
    listing = evidence_listing(ws.root / "evidence")
    assert len(listing["runs"]) == 3 and listing["attempts"] == [] and listing["failed"] == []
    dirs = {r.results["evidence"]["dir"] for r in runs if r.results} | {first.results["evidence"]["dir"]}  # type: ignore[index]
    assert len(dirs) == 3


def _checks_config(ws: Workspace, body: str) -> Path:
    config = ws.root / "ds4ci.toml"
    config.write_text(body)
    return config


def test_negative_control_runner_runs_checks_only(ws: Workspace) -> None:
    config = _checks_config(ws, (
        '[runner]\nrole = "negative-control"\nnegative_control_for = "gfx1151"\n'
        '[[checks]]\nname = "build"\ncommand = "echo \'[465/465] Linking dflash_server\'"\nparser = "build-progress"\n'
    ))
    run = ws.gate("--config", str(config))
    assert run.code == 0, run.stdout + run.stderr
    doc = run.results
    assert doc is not None
    assert doc["runner"] == {"name": "test-runner", "role": "negative-control", "negative_control_for": "gfx1151"}
    assert doc["widths"] == [] and doc["timings"]["servers"] == []
    assert [(c["name"], c["status"]) for c in doc["checks"]] == [("build", "pass")]
    assert processes_mentioning(str(ws.root)) == []


def test_a_failing_extra_check_fails_an_otherwise_passing_gate(ws: Workspace) -> None:
    config = _checks_config(ws, (
        '[[checks]]\nname = "unit"\ncommand = \'echo "========= ERROR SUMMARY: 2 errors"\'\nparser = "compute-sanitizer"\n'
    ))
    run = ws.gate("--config", str(config), widths="2")
    assert run.code == 1, run.stdout + run.stderr
    assert run.results is not None
    assert run.results["widths"][0]["verdict"] == "pass"
    assert "check 'unit': fail" in run.reasons()


def test_json_prints_one_summary_object_on_stdout_and_the_table_on_stderr(ws: Workspace) -> None:
    bundle = ws.root / "bundle.tar.gz"
    run = ws.gate("--json", widths="2,3", bundle_out=bundle)
    assert run.code == 0, run.stderr
    doc = json.loads(run.stdout)  # stdout is exactly one JSON object: no table, no "results:" line
    assert run.results is not None
    assert doc["verdict"] == run.results["verdict"] == "pass" and doc["exit_code"] == 0
    assert doc["widths"] == {"2": "pass", "3": "pass"}
    assert doc["evidence"] == {k: run.results["evidence"][k] for k in ("dir", "manifest_sha256")}
    assert doc["bundle_out"] == str(bundle) and bundle.is_file()
    assert doc["results_out"] is not None and doc["runner"] == run.results["runner"]["name"]
    assert f"bundle: {bundle}" in run.stderr and "q=2" in run.stderr  # the human table, on stderr


def test_json_keeps_the_exit_code_of_a_failing_gate(ws: Workspace) -> None:
    run = ws.gate("--json", widths="2", faults="leak-fused-verify")
    assert run.code == 1, run.stderr
    doc = json.loads(run.stdout)
    assert (doc["verdict"], doc["exit_code"], doc["widths"]) == ("fail", 1, {"2": "fail"})
    assert doc["reasons"]
