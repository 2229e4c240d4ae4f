"""The gate is right about the real server: one real-process test per conformance rule.

Variants of the real binary (where it prints its trace, when it flushes its summary, which prefix it
reads, older summary formats, failure lines) run against both the bundled simulator and the
independent protocol speaker in tests/servers/, so that no rule passes only because our simulator
shares our assumption.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gatekit import DS4CI, FOREIGN_SERVER, GateRun, Workspace, git_repo, sha256

# (simulator fault switch, foreign-server behaviour): the same variant of the real binary twice.
PASSING_VARIANTS = {
    "trace on stdout": ("trace-stdout", "trace-stdout"),
    "lines flushed after the response": ("summary-after-response", "summary-after-response"),
    "a build that reads only LUCE_DS4_*": ("luce-only", "luce-only"),
    "verify= field before full_snap": ("verify-field", None),
    "trailing ms/step text": ("ms-step-tail", None),
    "older %.2f/%d mean_accept": ("old-mean", None),
}
FAILING_VARIANTS = {
    "a build without matched/offered counters": (
        "no-counters", "no-counters", "the summary has no matched/offered counters"),
    "a failure line": ("fail-snapshot-restore", "failure-line", "speculation or rollback failed on the server"),
    "a draft that does not load": ("draft-load-fails", "no-draft", "served without speculation"),
}


def foreign(ws: Workspace) -> Workspace:
    ws.server = FOREIGN_SERVER
    return ws


def run_variant(tmp_path: Path, speaker: str, switch: str, **options: object) -> GateRun:
    ws = Workspace.create(tmp_path)
    if speaker == "foreign":
        foreign(ws)
        return ws.gate(env=ws.env(FOREIGN_BEHAVIOUR=switch), widths="2,3", **options)
    return ws.gate(faults=switch, widths="2,3", **options)


def cases(table: dict[str, tuple[str | None, ...]]) -> list[object]:
    out = []
    for name, row in table.items():
        for speaker, switch in (("sim", row[0]), ("foreign", row[1])):
            if switch is not None:
                out.append(pytest.param(speaker, switch, *row[2:], id=f"{name} ({speaker})"))
    return out


@pytest.mark.parametrize(("speaker", "switch"), cases(PASSING_VARIANTS))  # type: ignore[arg-type]
def test_variants_of_the_real_binary_pass(tmp_path: Path, speaker: str, switch: str) -> None:
    run = run_variant(tmp_path, speaker, switch)
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None and run.results["verdict"] == "pass"


@pytest.mark.parametrize(("speaker", "switch", "expected"), cases(FAILING_VARIANTS))  # type: ignore[arg-type]
def test_builds_that_cannot_prove_exactness_fail_saying_why(tmp_path: Path, speaker: str, switch: str, expected: str) -> None:
    run = run_variant(tmp_path, speaker, switch)
    assert run.code == 1, run.stdout + run.stderr
    assert expected in run.reasons()


def test_a_server_printing_exactly_the_upstream_gates_example_lines_passes(tmp_path: Path) -> None:
    """The upstream gate's own PASS lines (q_cap=4, so width 4) are a pass here too."""
    ws = foreign(Workspace.create(tmp_path))
    run = ws.gate(env=ws.env(FOREIGN_BEHAVIOUR="upstream-lines"), widths="4")
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    (cell,) = run.results["widths"][0]["prompts"]
    assert (cell["steps"], cell["matched"], cell["offered"], cell["tokens_spec"]) == (4, 5, 12, 3)


def test_luce_only_build_fails_when_only_the_dflash_prefix_is_set(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = tmp_path / "ds4ci.toml"
    config.write_text('[gate]\nenv_prefixes = ["DFLASH_"]\n')
    run = ws.gate(faults="luce-only", widths="2", config=config)
    # The build sees none of the variables ds4ci set: no trace and no countered summary in any arm, which
    # is exactly what a build without the reference-exact mode shows, so the gate cannot judge it.
    assert run.code == 3
    assert "this build has no reference-exact mode; the gate cannot judge it" in run.reasons()


def _argv(run: GateRun, key: str) -> list[str]:
    assert run.results is not None
    return json.loads((Path(run.results["evidence"]["dir"]) / "servers" / key / "command.json").read_text())["argv"]


def test_cuda_servers_start_without_fused_decode_and_hip_servers_with_it(tmp_path: Path) -> None:
    """The simulator refuses --ds4-fused-decode on CUDA with the real message and exit 2."""
    ws = Workspace.create(tmp_path)
    cuda = ws.gate(widths="2", target_device="cuda:0")
    assert cuda.code == 0, cuda.stdout + cuda.stderr
    assert "--ds4-fused-decode" not in _argv(cuda, "q2") and "--ds4-fused-decode" not in _argv(cuda, "target-only")
    assert cuda.results is not None and "--ds4-fused-decode" not in cuda.results["settings"]["server_args"]
    hip = ws.gate(widths="2", target_device="hip:0")
    assert hip.code == 0, hip.stdout + hip.stderr
    assert _argv(hip, "q2")[-3:] == ["--ds4-fused-decode", "--ds4-prefill", "exact"]


def test_a_forced_fused_decode_on_cuda_is_the_servers_refusal(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = tmp_path / "ds4ci.toml"
    config.write_text('[gate]\ndevice_args = ["--ds4-fused-decode", "--ds4-prefill", "exact"]\n')
    run = ws.gate(widths="2", target_device="cuda:0", config=config)
    assert run.code == 3
    assert "require single-device HIP DeepSeek4" in run.reasons()


def test_server_args_extend_and_device_args_replace_the_defaults(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = tmp_path / "ds4ci.toml"
    config.write_text('[gate]\ndevice_args = ["--ds4-prefill", "exact"]\n')
    run = ws.gate("--server-arg=--ds4-prefill", "--server-arg=exact", widths="2", target_device="hip:0", config=config)
    assert run.code == 0, run.stdout + run.stderr
    assert _argv(run, "q2")[-4:] == ["--ds4-prefill", "exact", "--ds4-prefill", "exact"]
    assert run.results is not None
    assert run.results["settings"]["server_args"] == ["--ds4-prefill", "exact", "--ds4-prefill", "exact"]
    assert "--server-arg=--ds4-prefill" in run.results["reproduce"]


def test_server_args_may_not_repeat_what_ds4ci_sets(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate("--server-arg=--port=9", widths="2")
    assert run.code == 2 and "set by ds4ci itself" in run.stderr


def test_every_request_states_every_sampler_field(tmp_path: Path) -> None:
    """The simulator's model card has penalties: a request that omitted them would lose speculation."""
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2")
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    final = Path(run.results["evidence"]["dir"])
    body = json.loads((final / "requests" / "q2" / "p0-r1.request.json").read_text())
    assert {k: body[k] for k in ("temperature", "top_p", "top_k", "frequency_penalty", "presence_penalty",
                                 "repetition_penalty", "stream", "seed", "max_tokens")} == {
        "temperature": 0, "top_p": 1, "top_k": 0, "frequency_penalty": 0, "presence_penalty": 0,
        "repetition_penalty": 1, "stream": False, "seed": 1234, "max_tokens": 64,
    }
    assert hashlib.sha256(body["messages"][0]["content"].encode()).hexdigest() == sha256(ws.prompts[0])


def test_inherited_numerics_knobs_are_recorded_and_identical_in_all_arms(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2,3", env=ws.env(GGML_CUDA_DISABLE_FUSION="1", DFLASH_MMID_GROUPED="1"))
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    inherited = {v["name"]: v for v in run.results["provenance"]["inherited"]}
    assert inherited["GGML_CUDA_DISABLE_FUSION"] == {"name": "GGML_CUDA_DISABLE_FUSION", "value": "1", "passed": True}
    # Pass-through variables are not policy: no arm's policy part differs because of them.
    assert all("GGML_CUDA_DISABLE_FUSION" not in entry for entry in run.results["policy"]["difference"])
    final = Path(run.results["evidence"]["dir"])
    assert json.loads((final / "env" / "provenance.json").read_text()) == run.results["provenance"]


def test_a_slow_teardown_after_every_answer_is_a_warning_not_an_error(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(faults="slow-teardown", widths="2", stop_timeout=1)
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    assert any("killed with SIGKILL after every request was answered" in w for w in run.results["warnings"])
    assert "warning: " in run.stdout


def test_default_stop_timeout_is_sixty_seconds(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", stop_timeout=None)
    assert run.results is not None and run.results["settings"]["stop_timeout_s"] == 60.0


def test_an_override_file_that_appears_while_a_server_runs_makes_the_run_an_error(tmp_path: Path) -> None:
    override = tmp_path / "ds4_spec_q"
    wrapper = tmp_path / "touching-server"
    wrapper.write_text(f'#!/bin/sh\necho 1 > "{override}"\nexec "{sys.executable}" -m ds4ci.simulator "$@"\n')
    wrapper.chmod(0o755)
    ws = Workspace.create(tmp_path, server=wrapper)
    config = tmp_path / "ds4ci.toml"
    # The sandbox gives the server its own /tmp; a runner that shares a folder with it ([sandbox] rw_paths)
    # still has the override file checked after each server.
    config.write_text(f'[gate]\nstale_override_files = ["{override}"]\n[sandbox]\nrw_paths = ["{tmp_path}"]\n')
    run = ws.gate(widths="2", config=config)
    assert run.code == 3
    assert "appeared while the server ran" in run.reasons()
    assert run.results is not None and run.results["widths"] == []  # nothing after the target-only server


def test_a_log_flood_is_an_error_and_the_log_stays_capped(tmp_path: Path) -> None:
    flooder = tmp_path / "flooding-server"
    flooder.write_text(
        "#!/bin/sh\n(while :; do echo '[noise] 0123456789012345678901234567890123456789'; done) >&2 &\n"
        f'exec "{sys.executable}" -m ds4ci.simulator "$@"\n'
    )
    flooder.chmod(0o755)
    ws = Workspace.create(tmp_path, server=flooder)
    run = ws.gate(widths="2", log_cap_mib=1)
    assert run.code == 3
    assert "log flood" in run.reasons()
    assert run.results is not None
    log = Path(run.results["evidence"]["dir"]) / "servers" / "target-only" / "stderr.log"
    assert log.stat().st_size <= 1 << 20


def test_a_relative_server_path_runs_the_file_hashed_not_one_on_path(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    local = tmp_path / "sim-server"  # the workspace's wrapper, named relative to the working directory
    decoy_dir = tmp_path / "decoy"
    decoy_dir.mkdir()
    (decoy_dir / "sim-server").write_text("#!/bin/sh\nexit 7\n")
    (decoy_dir / "sim-server").chmod(0o755)
    env = ws.env()
    env["PATH"] = f"{decoy_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [DS4CI, "gate", *ws.args(server_bin="sim-server", widths="2")], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["identities"]["server_bin"]["path"] == str(local)
    assert doc["identities"]["server_bin"]["sha256"] == sha256(local)
    server_dir = Path(doc["evidence"]["dir"]) / "servers" / "q2"
    argv = json.loads((server_dir / "command.json").read_text())["argv"]
    assert Path(argv[0]).name == local.name  # the private copy of the file hashed, never the one on PATH
    assert json.loads((server_dir / "lifecycle.json").read_text())["binary"] == {"path": argv[0], "sha256": sha256(local)}
    assert f"--server-bin {local}" in doc["reproduce"]


@pytest.mark.parametrize("where", ["cli", "config"])
def test_a_wrong_server_pin_stops_the_gate_before_any_server(tmp_path: Path, where: str) -> None:
    ws = Workspace.create(tmp_path)
    wrong = "0" * 64
    if where == "cli":
        run = ws.gate(widths="2", server_sha256=wrong)
    else:
        config = tmp_path / "ds4ci.toml"
        config.write_text(f'[gate]\nserver_sha256 = "{wrong}"\n')
        run = ws.gate(widths="2", config=config)
    assert run.code == 3
    assert "pinned SHA-256 mismatch" in run.reasons() and "server_bin" in run.reasons()
    assert run.results is not None and run.results["timings"]["servers"] == []


def test_a_right_server_pin_is_verified_and_recorded(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", server_sha256=sha256(ws.server))
    assert run.code == 0, run.stderr
    assert run.results is not None and run.results["identities"]["server_bin"]["verified"] is True


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("startup_timeout", "nan", "finite"),
        ("request_timeout", "inf", "finite"),
        ("stop_timeout", "1e12", "at most"),
        ("seed", "-1", "seed"),
        ("seed", str(2**64), "unsigned 64-bit"),
    ],
)
def test_bad_numbers_are_usage_errors_before_any_work(tmp_path: Path, option: str, value: str, expected: str) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", **{option: value})
    assert run.code == 2, run.stderr
    assert expected in run.stderr
    assert not (tmp_path / "evidence").exists()


@pytest.mark.parametrize("content", ["", "  \n\t\n"])
def test_an_empty_prompt_is_a_usage_error(tmp_path: Path, content: str) -> None:
    ws = Workspace.create(tmp_path)
    ws.prompts[0].write_text(content)
    run = ws.gate(widths="2")
    assert run.code == 2 and "empty or whitespace only" in run.stderr


def test_a_directory_given_as_config_or_results_out_is_a_usage_error(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    as_config = ws.gate(widths="2", config=tmp_path)
    assert as_config.code == 2 and "is a directory" in as_config.stderr
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    as_results = ws.gate(widths="2", results_out=out_dir)
    assert as_results.code == 2 and "is a directory" in as_results.stderr
    assert not (tmp_path / "evidence").exists()


def test_revisions_of_the_working_directory_are_recorded_by_default(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    repo = tmp_path / "checkout"
    head = git_repo(repo, {"f.txt": "one\n"})
    (repo / "f.txt").write_text("two\n")
    proc = subprocess.run(
        [DS4CI, "gate", *ws.args(widths="2")], cwd=repo, env=ws.env(), capture_output=True, text=True, timeout=180,
        check=False,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr  # a modified tree is never green (gate.allow_dirty_tree)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["revisions"]["head"]["sha"] == head and doc["revisions"]["dirty"] is True
    assert doc["reasons"][0].startswith("built from a modified tree")


def test_an_internal_error_is_exit_3_with_one_line_and_the_attempt_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in ds4ci (here: judging raises) never becomes a traceback or exit 1."""
    from ds4ci.gate.run import run_gate
    from ds4ci.judging import judge

    ws = Workspace.create(tmp_path)
    real, calls = judge.judge_target, []

    def broken_once(*args: Any, **kwargs: Any) -> Any:  # the gate's own call breaks; the derivation's works
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(judge, "judge_target", broken_once)
    outcome = run_gate(_config(ws, tmp_path, monkeypatch), progress=lambda _m: None)
    assert outcome.exit_code == 3
    assert outcome.results["reasons"] == ["internal error (a bug in ds4ci, please report it): KeyError: 'boom'"]
    assert Path(outcome.results["evidence"]["dir"]).parent.name == "failed"


def test_a_derivation_that_breaks_leaves_the_attempt_unpromoted_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """results.json cannot be derived (here: judging always raises): no verdict, the attempt stays in attempts/."""
    from ds4ci.gate.run import run_gate
    from ds4ci.judging import judge

    ws = Workspace.create(tmp_path)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(judge, "judge_target", broken)
    outcome = run_gate(_config(ws, tmp_path, monkeypatch), progress=lambda _m: None)
    assert outcome.exit_code == 3 and outcome.results["verdict"] == "error"
    assert outcome.results["reasons"][-1].startswith("evidence could not be sealed, derived and promoted: ")
    assert "KeyError" in outcome.results["reasons"][-1]
    assert Path(outcome.results["evidence"]["dir"]).parent.name == "attempts"
    assert (Path(outcome.results["evidence"]["dir"]) / "results.json").is_file()


def _config(ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from ds4ci.options import config

    for key, value in ws.env().items():
        monkeypatch.setenv(key, value)
    return config.load(None, {
        "server_bin": ws.server, "target": ws.target, "target_sha256": sha256(ws.target), "draft": ws.draft,
        "draft_sha256": sha256(ws.draft), "prompt_files": ws.prompts, "prompt_sha256s": [sha256(p) for p in ws.prompts],
        "evidence_dir": tmp_path / "evidence", "widths": "2", "runner": "t", "stop_timeout": 3,
    })


@pytest.mark.parametrize("variable", ["GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"])
def test_under_actions_a_write_credential_in_the_gates_environment_is_refused(tmp_path: Path, variable: str) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", env=ws.env(GITHUB_ACTIONS="true", **{variable: "ghs_" + "x" * 36}))
    assert run.code == 2, run.stdout + run.stderr
    assert variable in run.stderr and "/proc/<pid>/environ" in run.stderr
    assert not (tmp_path / "evidence").exists()  # refused before any work: no server started


def test_outside_actions_a_credential_is_a_warning(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    env = ws.env(GH_TOKEN="ghp_" + "x" * 36)
    env.pop("GITHUB_ACTIONS", None)
    run = ws.gate(widths="2", env=env)
    assert run.code == 0, run.stderr
    assert "warning: GH_TOKEN is set" in run.stderr


@pytest.mark.parametrize("containment", ["auto", "pid-namespace", "subreaper"])
def test_a_setsid_daemon_of_the_server_does_not_outlive_the_gate(tmp_path: Path, containment: str) -> None:
    """Every containment level: the daemon leaves the server's process group and session, and is still killed."""
    from gatekit import processes_mentioning

    from ds4ci.supervisor import sandbox

    ws = Workspace.create(tmp_path)
    pidfile = tmp_path / "daemon.pid"
    env = ws.env(
        "setsid-helper", DS4SIM_HELPER_PID_FILE=str(pidfile), DS4CI_CONTAINMENT=containment,
        DS4CI_SANDBOX_RW_PATHS=str(tmp_path),  # so the daemon can leave its pid file where the test reads it
    )
    run = ws.gate(widths="2", env=env)
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    expected = {"subreaper": "subreaper+sweep", "pid-namespace": "pid-namespace"}.get(containment)
    if expected is None:
        expected = "sandbox" if sandbox.refusal() is None else run.results["containment"]
    assert run.results["containment"] == expected
    assert pidfile.exists()  # the daemon really started (its pid is a namespace pid in the namespace paths)
    assert processes_mentioning(str(tmp_path)) == []  # its argv names the workspace: nothing survived


def test_under_actions_the_hash_cache_is_used_only_from_an_explicit_path(tmp_path: Path) -> None:
    """What PR code could write between runs is not trusted; an administrator's cache is."""
    ws = Workspace.create(tmp_path)
    old = 1_600_000_000  # files modified moments ago are never cached ("racily clean")
    for path in (ws.target, ws.draft, ws.server, *ws.prompts):
        os.utime(path, (old, old))
    actions = ws.env(GITHUB_ACTIONS="true")
    first = ws.gate(widths="2", env=actions)
    second = ws.gate(widths="2", env=actions)
    assert first.code == second.code == 0, second.stderr
    assert "hash cache not used" in second.stderr and "cache hit" not in second.stderr

    cache = tmp_path / "admin-cache.json"
    filled = subprocess.run(
        [DS4CI, "hash-cache", "add", str(ws.target), str(ws.draft), "--cache", str(cache)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert filled.returncode == 0, filled.stderr
    assert f"{sha256(ws.target)}  {ws.target}" in filled.stdout
    config = tmp_path / "ds4ci.toml"
    config.write_text(f'[gate]\nhash_cache_path = "{cache}"\n')
    third = ws.gate(widths="2", env=actions, config=config)
    assert third.code == 0, third.stderr
    assert "target: sha256" in third.stderr and "(cache hit)" in third.stderr
    assert "hash cache not used" not in third.stderr


def test_a_reviewer_note_is_recorded_and_shown(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate("--note", "this pull request changes ds4ci.toml; this run uses the base commit's settings", widths="2")
    assert run.code == 0, run.stderr
    assert run.results is not None
    assert run.results["warnings"][0] == "this pull request changes ds4ci.toml; this run uses the base commit's settings"
    bad = ws.gate("--note", "two\nlines", widths="2")
    assert bad.code == 2 and "--note" in bad.stderr
