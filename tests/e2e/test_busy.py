"""Busy GPU runner detection: parsers on real captures, the /proc scan, waiting, and preflight end to end.

The GPU is the only thing mocked: a fake ``nvidia-smi`` on PATH reports a foreign process (the
test process itself, which is not ds4ci's), then none.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT, TESTS

from ds4ci.runner import busy
from ds4ci.runner.busy import BusyCheck, BusyParseError, GpuProcess, Holder

REPO = ROOT
DATA = TESTS / "data" / "busy"
FINGERPRINT_QUERY = REPO / "tests" / "data" / "fingerprint" / "nvidia-h200" / "nvidia-smi-query-noheader.csv"
THREE = ("pid", "process_name", "used_gpu_memory")
ZERO_UUID = "GPU-00000000-0000-0000-0000-000000000000"  # the captures' GPU uuids are zeroed


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# ----- nvidia-smi --query-compute-apps, real captures ------------------------------------------


@pytest.mark.parametrize(
    ("name", "fields", "expected"),
    [
        ("h200-busy-apps.csv", busy.NVIDIA_APPS_FIELDS, [(671, "/tmp/gpu-holder", 1542, ZERO_UUID)]),
        ("h200-busy-apps-noheader.csv", busy.NVIDIA_APPS_FIELDS, [(671, "/tmp/gpu-holder", 1542, ZERO_UUID)]),
        ("h200-busy-apps-noheader-nounits.csv", THREE, [(671, "/tmp/gpu-holder", 1542, None)]),
        ("nvidia-smi-compute-apps.csv", busy.NVIDIA_APPS_FIELDS,
         [(574, "python3", 1634, "GPU-00000000-0000-0000-0000-000000000000")]),
        ("nvidia-smi-compute-apps-noheader.csv", THREE, [(574, "python3", 1634, None)]),
        ("h200-idle-apps.csv", busy.NVIDIA_APPS_FIELDS, []),
        ("h200-idle-apps-noheader.csv", busy.NVIDIA_APPS_FIELDS, []),
        ("h200-idle-apps-noheader-nounits.csv", THREE, []),
        ("nvidia-smi-compute-apps-idle.csv", THREE, []),
    ],
)
def test_nvidia_compute_apps_real_captures(name: str, fields: tuple[str, ...], expected: list[tuple[Any, ...]]) -> None:
    found = busy.parse_nvidia_compute_apps(read(name), fields)
    assert [(p.pid, p.name, p.memory_mib, p.gpu) for p in found] == expected
    assert all(p.sources == ("nvidia-smi",) for p in found)


def test_the_table_view_and_the_query_agree_on_the_busy_capture() -> None:
    # nvidia-smi-busy.txt is the plain `nvidia-smi` of the same moment: pid 574 python3 1634MiB.
    assert "574      C   python3                                1634MiB" in read("nvidia-smi-busy.txt")
    (proc,) = busy.parse_nvidia_compute_apps(read("nvidia-smi-compute-apps-noheader.csv"), THREE)
    assert proc.describe() == "pid 574 python3, 1634 MiB"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (FINGERPRINT_QUERY.read_text(), "expected a process id, found 'NVIDIA H200'"),  # the wrong query's answer
        ("574, python3\n", "expected 4 comma-separated fields"),
        ("574, python3, lots, GPU-1\n", "expected used_gpu_memory in MiB"),
        ("pid, name\n", "expected a process_name column"),
        ("-3, python3, 5, GPU-1\n", "expected a process id"),
    ],
)
def test_nvidia_malformed_output_is_refused(text: str, message: str) -> None:
    with pytest.raises(BusyParseError, match=message):
        busy.parse_nvidia_compute_apps(text)


def test_nvidia_unknown_memory_and_commas_in_a_process_name() -> None:
    (proc,) = busy.parse_nvidia_compute_apps("77, /opt/app, v2/run, [N/A], GPU-9\n")
    assert (proc.pid, proc.name, proc.memory_mib, proc.gpu) == (77, "/opt/app, v2/run", None, "GPU-9")
    assert proc.describe() == "pid 77 /opt/app, v2/run"


# ----- rocm-smi --showpids, outputs quoted in public issue threads ----------------------------


def test_rocm_showpids_tab_separated() -> None:
    (proc,) = busy.parse_rocm_showpids(read("rocm-smi-showpids-tabs.txt"))
    assert (proc.pid, proc.name, proc.memory_mib, proc.sources) == (1684258, "kfd_open", 0, ("rocm-smi",))


def test_rocm_showpids_space_padded_with_vram_in_bytes() -> None:
    found = busy.parse_rocm_showpids(read("rocm-smi-showpids-spaces.txt"))
    assert len(found) == 8
    big = next(p for p in found if p.pid == 1168514)
    assert (big.name, big.memory_mib) == ("pt_main_thread", 177386942464 // (1024 * 1024))


def test_rocm_showpids_unknown_values_and_noise_lines() -> None:
    found = busy.parse_rocm_showpids(read("rocm-smi-showpids-unknown.txt"))
    assert [(p.pid, p.name, p.memory_mib) for p in found] == [
        (55573, "gmx_mpi", None), (55571, "gmx_mpi", None), (55574, "gmx_mpi", None), (55572, "gmx_mpi", None)
    ]


def test_rocm_showpids_idle() -> None:
    assert busy.parse_rocm_showpids(read("rocm-smi-showpids-idle.txt")) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ERROR: GPU[0] : Unable to read KFD\n", "expected a 'PID PROCESS NAME"),
        ("", "expected a 'PID PROCESS NAME"),
        (read("rocm-smi-showpids-tabs.txt") + "No KFD PIDs currently running\n", "ambiguous"),
        ("PID PROCESS NAME GPU(s) VRAM USED SDMA USED CU OCCUPANCY\n12 x 1 much 0 0\n", "VRAM USED in bytes"),
        ("PID PROCESS NAME GPU(s) VRAM USED SDMA USED CU OCCUPANCY\n12 x 1\n", "expected PID, PROCESS NAME"),
    ],
)
def test_rocm_malformed_output_is_refused(text: str, message: str) -> None:
    with pytest.raises(BusyParseError, match=message):
        busy.parse_rocm_showpids(text)


# ----- the /proc scan --------------------------------------------------------------------------


def holders_from_capture(name: str) -> list[Holder]:
    """capture.sh's holder list: pid, comm, user, device node (one line per open node)."""
    holders: dict[int, Holder] = {}
    for line in read(name).splitlines():
        pid, comm, user, node = line.split("\t")
        have = holders.get(int(pid))
        holders[int(pid)] = Holder(int(pid), comm, user, (*(have.nodes if have else ()), node))
    return list(holders.values())


def test_compute_holders_on_the_real_h200_captures() -> None:
    (proc,) = busy.compute_holders(holders_from_capture("h200-busy-proc-holders.tsv"))
    assert (proc.pid, proc.name, proc.user, proc.sources) == (671, "gpu-holder", "root", ("proc",))
    assert busy.compute_holders(holders_from_capture("h200-idle-proc-holders.tsv")) == []


def test_only_compute_nodes_count() -> None:
    assert busy.compute_holders([Holder(9, "Xorg", "root", ("/dev/nvidia0", "/dev/nvidiactl"))]) == []
    assert [p.pid for p in busy.compute_holders([Holder(9, "hip", "ci", ("/dev/kfd",))])] == [9]


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A child process holding a fake device node open (real /dev nodes cannot be made here)."""
    node = tmp_path / "nvidia-uvm"
    node.write_bytes(b"")
    ready = tmp_path / "ready"
    code = f"f = open({str(node)!r}); open({str(ready)!r}, 'w').close(); import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        for _ in range(500):
            if ready.exists():
                break
            time.sleep(0.01)
        yield proc, node
    finally:
        proc.kill()
        proc.wait()


def test_scan_reads_fd_links_and_own_tree_is_not_foreign(holder: tuple[subprocess.Popen[bytes], Path]) -> None:
    proc, node = holder
    found = busy.scan_device_holders([str(node.parent / "nvidia*")])
    assert [(h.pid, h.nodes) for h in found] == [(proc.pid, (str(node),))]
    gpu = busy.compute_holders(found, compute_nodes=(str(node),))
    assert busy.combine(gpu, busy.own_tree()) == ()  # our child: ours
    (foreign,) = busy.combine(gpu, {os.getpid()})
    assert (foreign.pid, foreign.user) == (proc.pid, getpass.getuser())


def test_combine_merges_sources_and_keeps_the_tools_name_and_memory() -> None:
    found = [GpuProcess(5, "/usr/bin/python3", 900, "GPU-1", None, ("nvidia-smi",)),
             GpuProcess(5, "python3", None, None, "bob", ("proc",)),
             GpuProcess(3, "mine", 1, None, None, ("rocm-smi",))]
    (proc,) = busy.combine(found, own={3}, user_of=lambda pid: "nobody")
    assert proc == GpuProcess(5, "/usr/bin/python3", 900, "GPU-1", "bob", ("nvidia-smi", "proc"))


# ----- waiting (a fake clock: no timed assertions) ---------------------------------------------


FOREIGN = BusyCheck((GpuProcess(574, "python3", 1634),))
FREE = BusyCheck()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def run_wait(answers: list[BusyCheck], busy_wait_s: float, poll_s: float = 5.0) -> tuple[busy.BusyOutcome, list[str], Clock]:
    clock, lines, queue = Clock(), [], list(answers)

    def check() -> BusyCheck:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    outcome = busy.wait_until_free(check, runner="sm90", busy_wait_s=busy_wait_s, progress=lines.append,
                                   clock=clock, sleep=clock.sleep, poll_s=poll_s)
    return outcome, lines, clock


def test_free_runner_is_checked_once() -> None:
    outcome, lines, clock = run_wait([FREE], 600)
    assert (outcome.busy, outcome.checks, lines, clock.slept) == (False, 1, [], [])
    assert outcome.problems() == []


def test_busy_without_busy_wait_ends_at_once_as_runner_busy() -> None:
    outcome, lines, _ = run_wait([FOREIGN], 0)
    assert outcome.busy and outcome.checks == 1 and lines == []
    (problem,) = outcome.problems()
    assert problem.startswith("runner busy: sm90 is in use by pid 574 python3, 1634 MiB (busy_wait is 0: not waited)")
    record = outcome.record()
    assert record["busy"] is True
    assert record["processes"] == [{"pid": 574, "name": "python3", "memory_mib": 1634, "gpu": None, "user": None,
                                    "sources": []}]


def test_waits_until_free_with_a_heartbeat_every_15_s() -> None:
    outcome, lines, clock = run_wait([FOREIGN] * 8 + [FREE], 600)
    assert not outcome.busy and outcome.checks == 9
    assert clock.slept == [5.0] * 8
    heartbeats = [line for line in lines if line.startswith("waiting:")]
    assert heartbeats == [
        "waiting: sm90 busy (pid 574 python3, 1634 MiB); 600 s left of busy_wait 600 s",
        "waiting: sm90 busy (pid 574 python3, 1634 MiB); 585 s left of busy_wait 600 s",
        "waiting: sm90 busy (pid 574 python3, 1634 MiB); 570 s left of busy_wait 600 s",
    ]
    assert lines[-1] == "sm90 is free after 40 s"


def test_still_busy_at_the_deadline_is_runner_busy() -> None:
    outcome, lines, clock = run_wait([FOREIGN], 20)
    assert outcome.busy
    assert sum(clock.slept) == 20 and outcome.waited_s == 20
    assert len([line for line in lines if line.startswith("waiting:")]) == 2  # at 0 s and 15 s
    assert "(waited 20 s of busy_wait 20 s)" in outcome.problems()[0]


def test_unparseable_output_ends_the_wait_at_once() -> None:
    broken = BusyCheck(FOREIGN.processes, problems=("busy check: nvidia-smi answered something unexpected",))
    outcome, _, clock = run_wait([broken], 600)
    assert clock.slept == [] and outcome.problems()[0].startswith("busy check:")


@pytest.mark.parametrize("value", [-1, "10", float("nan"), float("inf"), True])
def test_bad_busy_wait_is_a_usage_error(tmp_path: Path, value: object) -> None:
    from ds4ci.errors import UsageError

    with pytest.raises(UsageError, match="expected a number of seconds >= 0"):
        busy.parse_busy_wait(value, "preflight.busy_wait")


# ----- ds4ci preflight end to end, fake nvidia-smi on PATH ------------------------------------


def fake_nvidia_smi(bindir: Path, report: str, busy_calls: int) -> Path:
    """Answers the fingerprint query with the real H200 capture; the compute-apps query lists
    ``report`` (a pid expression) for its first ``busy_calls`` calls, then nothing."""
    counter = bindir / "apps-calls"
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in\n'
        f'  "--query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader,nounits") '
        f"cat '{FINGERPRINT_QUERY}' ;;\n"
        f'  "{" ".join(busy.NVIDIA_APPS_QUERY[1:])}")\n'
        f"    n=$(cat '{counter}' 2>/dev/null || echo 0); echo $((n + 1)) > '{counter}'\n"
        f'    if [ "$n" -lt {busy_calls} ]; then echo "{report}, python3, 1634, {ZERO_UUID}"; fi ;;\n'
        '  *) echo "unexpected args: $*" >&2; exit 64 ;;\n'
        "esac\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return counter


@pytest.fixture
def box(tmp_path: Path) -> dict[str, Any]:
    stale = tmp_path / "stale"
    stale.mkdir()
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text(
        '[runner]\nname = "sm90"\nrole = "negative-control"\n\n[gate]\n'
        f'evidence_dir = "{tmp_path / "evidence"}"\nstale_override_files = ["{stale / "ds4_spec_q"}"]\n',
        encoding="utf-8",
    )
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "ROCM_PATH": str(tmp_path / "no-rocm"),
           "CUDA_HOME": str(tmp_path / "no-cuda"), "HOME": str(tmp_path), "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
    return {"bin": tmp_path / "bin", "config": cfg, "env": env, "tmp": tmp_path}


def preflight(box: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", "from ds4ci.cli import main; main()", "preflight", "--json", *args]
    return subprocess.run(argv, env=box["env"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_foreign_gpu_process_makes_the_runner_busy(box: dict[str, Any]) -> None:
    fake_nvidia_smi(box["bin"], str(os.getpid()), busy_calls=1000)  # this test process is not ds4ci's
    proc = preflight(box, "--config", str(box["config"]))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["ready"] is False
    (problem,) = out["problems"]
    assert problem.startswith(f"runner busy: sm90 is in use by pid {os.getpid()} python3, 1634 MiB, user {getpass.getuser()}")
    record = out["busy"]
    assert (record["busy"], record["runner"], record["busy_wait_s"], record["checks"]) == (True, "sm90", 0.0, 1)
    (gpu,) = record["processes"]
    assert gpu == {"pid": os.getpid(), "name": "python3", "memory_mib": 1634, "user": getpass.getuser(),
                   "gpu": "GPU-00000000-0000-0000-0000-000000000000", "sources": ["nvidia-smi"]}
    assert f"not ready: runner busy: sm90 is in use by pid {os.getpid()}" in proc.stderr


def test_busy_then_idle_waits_with_heartbeat_then_is_ready(box: dict[str, Any]) -> None:
    counter = fake_nvidia_smi(box["bin"], str(os.getpid()), busy_calls=2)
    proc = preflight(box, "--config", str(box["config"]), "--busy-wait", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["ready"] is True and "busy" not in out
    assert f"ds4ci preflight: waiting: sm90 busy (pid {os.getpid()} python3, 1634 MiB, user {getpass.getuser()})" in proc.stderr
    assert "ds4ci preflight: sm90 is free after" in proc.stderr
    assert counter.read_text().strip() == "3"  # busy, busy, free


def test_busy_wait_from_the_config_file_and_still_busy_at_its_end(box: dict[str, Any]) -> None:
    fake_nvidia_smi(box["bin"], str(os.getpid()), busy_calls=1000)
    box["config"].write_text(box["config"].read_text() + "\n[preflight]\nbusy_wait = 0.5\n", encoding="utf-8")
    proc = preflight(box, "--config", str(box["config"]))
    assert proc.returncode == 3
    out = json.loads(proc.stdout)
    assert out["busy"]["busy_wait_s"] == 0.5 and out["busy"]["checks"] >= 2
    assert "ds4ci preflight: waiting: sm90 busy" in proc.stderr
    assert "of busy_wait 0.5 s); no gate was started" in out["problems"][0]


def test_ds4cis_own_process_is_not_foreign(box: dict[str, Any]) -> None:
    # ds4ci's own host pid, as a real nvidia-smi would report it: the probe may run in a PID namespace
    # (the supervisor's containment), where $PPID is a namespace pid, so read it from the run token.
    fake_nvidia_smi(box["bin"], "$(echo \"$DS4CI_RUN_TOKEN\" | cut -d: -f3)", busy_calls=1000)
    proc = preflight(box, "--config", str(box["config"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "busy" not in json.loads(proc.stdout)


def test_bad_busy_wait_flag_exits_2(box: dict[str, Any]) -> None:
    proc = preflight(box, "--busy-wait", "-5")
    assert proc.returncode == 2
    assert "--busy-wait: expected a number of seconds >= 0, found -5.0" in proc.stderr
