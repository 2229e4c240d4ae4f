"""Pull-request code tries to escape, as an attacker would; under the sandbox every attempt is held.

The attacker is a real shell script used as the server (it then execs the simulator, so the gate
runs to its verdict) and as a ``[[checks]]`` command. Each attack prints ``ATTACK <name>: held`` or
``ATTACK <name>: ESCAPED`` on stderr, which ds4ci keeps in the evidence; the test reads it there and
also checks the host side (files unchanged, nothing left running).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from gatekit import DS4CI, Workspace, processes_mentioning
from paths import ROOT

import ds4ci
from ds4ci import supervisor
from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")

PLANTED = "ghs_planted_value_ds4ci_must_hide"
ATTACKS = (
    "write-ds4ci-installed-file", "create-file-in-ds4ci", "write-home", "read-home-secret",
    "read-runner-credentials", "read-runner-registration", "see-evidence-folder", "write-evidence-folder",
    "read-ds4ci-environ", "own-environment-tokens",
)


def attack_script(path: Path, paths: dict[str, Path], marker: str, then: str) -> Path:
    """A script that tries every attack in ATTACKS, starts a setsid daemon named by ``marker``, then ``then``."""
    q = {k: shlex.quote(str(v)) for k, v in paths.items()}
    path.write_text(f"""#!/bin/sh
attempt() {{ name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ATTACK $name: ESCAPED" >&2; \\
  else echo "ATTACK $name: held" >&2; fi; }}
attempt write-ds4ci-installed-file sh -c ': >> {q["pkg"]}/evidence/bundle.py'
attempt create-file-in-ds4ci sh -c ': > {q["pkg"]}/evil_$$.py'
attempt write-home sh -c 'echo pwned > {q["home"]}/pwned'
attempt read-home-secret grep -q SECRET {q["home"]}/.ssh/id_ed25519
attempt read-runner-credentials grep -q RUNNER-SECRET {q["runner"]}/.credentials
attempt read-runner-registration grep -q RUNNER-SECRET {q["runner"]}/.runner
attempt see-evidence-folder sh -c 'ls -A {q["evidence"]} | grep -q .'
attempt write-evidence-folder sh -c 'echo x > {q["evidence"]}/planted'
attempt read-ds4ci-environ sh -c 'cat /proc/[0-9]*/environ | tr "\\000" "\\n" | grep -q {PLANTED}'
attempt own-environment-tokens sh -c 'env | grep -q {PLANTED}'
setsid sh -c 'sleep 600; : {marker}' </dev/null >/dev/null 2>&1 &
{then}
""")
    path.chmod(0o755)
    return path


def planted(tmp_path: Path) -> dict[str, Path]:
    """A fake $HOME with an SSH key and a fake self-hosted runner install next to its _work folder."""
    home, runner = tmp_path / "home", tmp_path / "actions-runner"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("SECRET private key\n")
    (runner / "_work").mkdir(parents=True)
    for name in (".credentials", ".runner"):
        (runner / name).write_text('{"token": "RUNNER-SECRET"}\n')
    return {"pkg": Path(ds4ci.__file__).resolve().parent, "home": home, "runner": runner,
            "evidence": tmp_path / "evidence"}


def verdicts(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if line.startswith("ATTACK "):
            name, _, outcome = line[len("ATTACK "):].partition(": ")
            found[name] = outcome
    return found


def attacker_env(ws: Workspace, home: Path) -> dict[str, str]:
    return ws.env(
        HOME=str(home), GH_ENTERPRISE_TOKEN=PLANTED, DEPLOY_SECRET=PLANTED, DS4CI_ANYTHING=PLANTED, DS4CI=PLANTED,
        GITHUB_TOKEN=PLANTED,
    )


def test_a_server_and_a_check_escape_nowhere(tmp_path: Path) -> None:
    paths = planted(tmp_path)
    marker = f"ds4ci-daemon-{os.getpid()}-{tmp_path.name}"
    checkout = paths["runner"] / "_work" / "engine" / "engine"  # where a self-hosted runner checks the PR out
    (checkout / "bin").mkdir(parents=True)
    server = attack_script(
        checkout / "bin" / "attack-server", paths, marker, f'exec {shlex.quote(sys.executable)} -m ds4ci.simulator "$@"'
    )
    check = attack_script(checkout / "bin" / "attack-check", paths, marker + "-check", "exit 0")
    config = checkout / "ds4ci.toml"
    config.write_text(f'[[checks]]\nname = "attack"\ncommand = "{check}"\n')
    ws = Workspace.create(tmp_path, server=server)
    before = (paths["pkg"] / "evidence" / "bundle.py").read_bytes()
    run = ws.gate(widths="2", env=attacker_env(ws, paths["home"]), config=config)
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None and run.results["containment"] == "sandbox"
    (attempt,) = (ws.root / "evidence" / "runs").iterdir()
    server_log = (attempt / "servers" / "target-only" / "stderr.log").read_text()
    (check_log,) = (attempt / "checks").glob("*.log")
    for text in (server_log, check_log.read_text()):
        assert verdicts(text) == dict.fromkeys(ATTACKS, "held"), text
    assert (paths["pkg"] / "evidence" / "bundle.py").read_bytes() == before
    assert not list(paths["pkg"].glob("evil_*.py")) and not (paths["home"] / "pwned").exists()
    assert not (paths["evidence"] / "planted").exists()
    assert processes_mentioning(marker) == []  # the daemons went down with their sandboxes
    assert '"containment": "sandbox"' in (attempt / "servers" / "target-only" / "lifecycle.json").read_text()


def test_a_real_servers_view_hides_ds4ci_and_its_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the test suite's ro_paths (a real runner), ds4ci's install and this venv are not even visible."""
    monkeypatch.delenv(sandbox.RO_VARIABLE, raising=False)
    out = tmp_path / "out.txt"
    probe = f"for p in {shlex.quote(str(ROOT))} {shlex.quote(sys.prefix)} /root /home /work /var /run; do " \
            'test -e "$p" && echo "VISIBLE $p"; done; echo done'
    result = supervisor.Supervisor(sweep_stale=False).run(
        ["sh", "-c", probe], 30, stdout=out, stderr=supervisor.STDOUT, view=supervisor.View()
    )
    assert result.containment == "sandbox" and result.returncode == 0
    assert out.read_text() == "done\n"


def path_without_bwrap(path: str, folder: Path) -> str:
    """``path`` with every folder that holds bwrap replaced by ``folder``: links to the same tools, bwrap left out."""
    folder.mkdir()
    keep = []
    for entry in path.split(os.pathsep):
        if not (Path(entry) / "bwrap").exists():
            keep.append(entry)
            continue
        for tool in Path(entry).iterdir():
            if tool.name != "bwrap" and not (folder / tool.name).exists():
                (folder / tool.name).symlink_to(tool)
    return os.pathsep.join([*keep, str(folder)])


def test_preflight_reports_a_required_sandbox_that_cannot_run(tmp_path: Path) -> None:
    env = {**os.environ, "GITHUB_ACTIONS": "true"}  # under Actions the sandbox is required by default
    env["PATH"] = path_without_bwrap(env["PATH"], tmp_path / "path-without-bwrap")
    proc = subprocess.run([DS4CI, "preflight", "--json"], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["sandbox"]["available"] is False
    assert any("apt-get install bubblewrap" in p for p in out["problems"])


def test_required_sandbox_without_bwrap_stops_the_gate_before_pr_code(tmp_path: Path) -> None:
    """[sandbox] require = true on a runner without bwrap: exit 3, what to install, and no PR process ran."""
    flag = tmp_path / "ran"
    server = tmp_path / "bin" / "server"
    server.parent.mkdir()
    server.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(flag))}\n")
    server.chmod(0o755)
    config = tmp_path / "ds4ci.toml"
    config.write_text("[sandbox]\nrequire = true\n")
    ws = Workspace.create(tmp_path, server=server)
    env = ws.env()
    env["PATH"] = path_without_bwrap(env["PATH"], tmp_path / "path-without-bwrap")
    run = ws.gate(widths="2", env=env, config=config)
    assert run.code == 3, run.stderr
    assert "apt-get install bubblewrap" in run.reasons() and "no PR code was run" in run.reasons()
    assert not flag.exists()


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def test_the_unprivileged_path_holds_too(tmp_path: Path) -> None:
    """bwrap run as `nobody` (a user namespace maps only its uid): the same view, hidden home, no ds4ci."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    scratch = Path(tempfile.mkdtemp(prefix="ds4ci-nobody-"))  # pytest's own folders are root's alone
    os.chown(scratch, 65534, 65534)
    read_fd, write_fd = os.pipe()
    command = ["sh", "-c", "id -u; test -e /root && echo VISIBLE-ROOT; test -e /work && echo VISIBLE-WORK; echo done"]
    argv = sandbox.argv(command, sandbox.Policy(), sandbox.View(), scratch=scratch, cwd=None, status_fd=write_fd,
                        unprivileged=True)
    proc = subprocess.run(argv, pass_fds=(write_fd,), capture_output=True, text=True, timeout=30, check=False,
                          preexec_fn=_as_nobody, env=sandbox.environment({"PATH": sandbox.DEFAULT_PATH}))
    os.close(write_fd)
    os.close(read_fd)
    shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0 and "namespace" in proc.stderr.lower():
        pytest.skip(f"the kernel refuses unprivileged user namespaces here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "65534\ndone\n"


def test_evidence_and_ds4ci_inside_a_shown_folder_stay_hidden_and_read_only(tmp_path: Path) -> None:
    """The default evidence folder lives in the checkout, which a build may write: it is covered, ds4ci frozen."""
    checkout = tmp_path / "checkout"
    evidence, installed = checkout / "ds4ci-evidence", checkout / "venv"
    (evidence / "runs" / "earlier").mkdir(parents=True)
    installed.mkdir()
    (installed / "bundle.py").write_text("original\n")
    out = tmp_path / "out.txt"
    script = (
        f"cd {shlex.quote(str(checkout))}; ls -A ds4ci-evidence; rm -rf ds4ci-evidence/runs 2>/dev/null; "
        "{ echo evil > venv/bundle.py; } 2>/dev/null; echo built > artefact && echo wrote-artefact"
    )
    policy = sandbox.Policy(hidden=(evidence,), frozen=(installed,))
    result = supervisor.Supervisor(sweep_stale=False, policy=policy).run(
        ["sh", "-c", script], 30, stdout=out, stderr=supervisor.STDOUT, view=supervisor.View(rw=(checkout,))
    )
    assert result.containment == "sandbox"
    assert out.read_text() == "wrote-artefact\n"  # the evidence folder looked empty; the build's own writes work
    assert (evidence / "runs" / "earlier").is_dir() and (installed / "bundle.py").read_text() == "original\n"


def test_the_environment_keeps_the_servers_families_and_drops_every_credential() -> None:
    given = {
        "DS4SIM_TOKEN_DELAY": "0.005", "LUCE_DS4_SPEC": "1", "HIP_VISIBLE_DEVICES": "0", "PATH": "/usr/bin",
        "GH_ENTERPRISE_TOKEN": "x", "HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "x", "DB_PASSWORD": "x",
        "DS4CI": "/opt/ds4ci", "DS4CI_RUN_TOKEN": "x", "GITHUB_SHA": "x", "ACTIONS_CACHE_URL": "x",
        "RUNNER_TEMP": "/home/runner/_work/_temp", "HOME": "/home/runner", "XDG_CONFIG_HOME": "/home/runner/.config",
    }
    env = sandbox.environment(given)
    assert env == {"DS4SIM_TOKEN_DELAY": "0.005", "LUCE_DS4_SPEC": "1", "HIP_VISIBLE_DEVICES": "0",
                   "PATH": "/usr/bin", "HOME": "/tmp", "TMPDIR": "/tmp"}


def test_the_bundled_simulator_runs_sandboxed_with_nothing_configured(tmp_path: Path) -> None:
    """gate.server = "simulator" (the trusted config) shows ds4ci's environment read-only, unasked; the console
    script ds4ci-sim as server_bin gets nothing from its first line, and the sandbox says it could not start it."""
    from gatekit import BIN

    ws = Workspace.create(tmp_path, server=BIN / "ds4ci-sim")
    env = ws.env()
    env.pop(sandbox.RO_VARIABLE, None)
    run = ws.gate(widths="2", env=env, server_bin=None, server="simulator")
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None and run.results["containment"] == "sandbox"
    script = ws.gate(widths="2", env=env)
    assert script.code == 3 and script.results is not None
    assert "a script whose #! interpreter is not one gate.server_interpreters names" in script.results["reasons"][0]


def test_helpers_still_running_when_a_stopped_command_exits_are_recorded_as_killed(tmp_path: Path) -> None:
    """bwrap's init takes the namespace down with the command; what still ran there after SIGTERM is named."""
    marker = f"987654.{os.getpid()}"
    command = f"(trap '' TERM; exec sleep {marker}) & exec sleep 300"  # the helper ignores SIGTERM
    child = supervisor.Supervisor(sweep_stale=False).spawn(["sh", "-c", command], view=supervisor.View())
    try:
        deadline = time.monotonic() + 10  # until the helper runs sleep itself (bwrap's argv names the marker too)
        while not any(line.split(": ", 1)[1].startswith("sleep") for line in processes_mentioning(marker)):
            assert time.monotonic() < deadline, "the helper did not start"
            time.sleep(0.02)
        child.poll()
        assert child.terminate(5.0) is False  # the command itself went at SIGTERM
    finally:
        killed = child.sweep()
    assert child.containment == "sandbox" and child.returncode == -15
    assert [k.reason for k in killed if marker in k.cmdline] == ["killed with its namespace"], killed
    assert processes_mentioning(marker) == []


def test_helpers_that_needed_sigkill_are_named_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kill names all it kills, also what bwrap's init takes down with the command before its own turn comes;
    the namespace going down does not name the same processes again."""
    marker = f"987653.{os.getpid()}"
    command = f"trap '' TERM; sleep {marker} & while :; do sleep 0.05; done"  # both ignore SIGTERM
    child = supervisor.Supervisor(sweep_stale=False).spawn(["bash", "-c", command], view=supervisor.View())
    kill = psutil.Process.kill
    helper = 0

    def kill_then_let_the_namespace_go(proc: psutil.Process) -> None:
        """When the command is killed, its init ends and the kernel kills the rest: wait until the helper is gone."""
        kill(proc)
        deadline = time.monotonic() + 30
        while proc.pid == child.pid and any(line.startswith(f"{helper}:") for line in processes_mentioning(marker)):
            assert time.monotonic() < deadline, "the namespace did not go with its command"
            time.sleep(0.01)

    try:
        deadline = time.monotonic() + 10  # until the helper runs sleep itself (bwrap's argv names the marker too)
        while not (running := [line for line in processes_mentioning(marker) if line.split(": ", 1)[1].startswith("sleep")]):
            assert time.monotonic() < deadline, "the helper did not start"
            time.sleep(0.02)
        helper = int(running[0].split(":")[0])
        assert child.poll() is None  # a look at the namespace while the helper runs
        with monkeypatch.context() as patch:
            patch.setattr(psutil.Process, "kill", kill_then_let_the_namespace_go)
            assert child.terminate(0.5) is True
    finally:
        killed = child.sweep()
    pids = [k.pid for k in killed]
    assert len(pids) == len(set(pids)), killed
    assert [(k.cmdline, k.reason) for k in killed if k.pid == helper] == [(f"sleep {marker}", "descendant")], killed
    assert processes_mentioning(marker) == []
