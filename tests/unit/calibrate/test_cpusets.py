"""The CPU sets of gates side by side, and the launcher that runs a gate on one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ds4ci.calibrate import cpusets, pin
from ds4ci.errors import UsageError
from ds4ci.supervisor.cpuonline import cpu_list


def test_split_gives_disjoint_runs_covering_every_cpu() -> None:
    sets = cpusets.split([7, 0, 1, 2, 3, 4, 5, 6, 9], 4)
    assert sets == [(0, 1, 2), (3, 4), (5, 6), (7, 9)]
    assert sorted(c for s in sets for c in s) == [0, 1, 2, 3, 4, 5, 6, 7, 9]


def test_split_refuses_more_gates_than_cpus_and_no_gate() -> None:
    with pytest.raises(UsageError, match="need at least 3 CPUs"):
        cpusets.split([0, 1], 3)
    with pytest.raises(UsageError, match="at least 1"):
        cpusets.Slots(cpusets.NONE, 0)
    with pytest.raises(UsageError, match="expected one of none, affinity, affinity\\+online"):
        cpusets.Slots("taskset", 2)


def test_cpu_list_and_parse_are_inverse() -> None:
    assert cpu_list([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert pin.parse("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    for bad in ("", "a", "3-1", "-1", "1,,2"):
        with pytest.raises(ValueError):
            pin.parse(bad)


def test_slots_hand_each_gate_a_set_no_running_gate_holds() -> None:
    slots = cpusets.Slots(cpusets.ONLINE, 2, cpus=[0, 1, 2, 3])
    with slots.take() as first, slots.take() as second:
        assert first is not None and second is not None and not set(first) & set(second)
    assert slots.gate_args() == (cpusets.ONLINE_FLAG,)
    assert slots.describe((0, 1)) == {"cpu_sets": "affinity+online", "cpus": "0-1"}
    none = cpusets.Slots(cpusets.NONE, 2)
    with none.take() as cpus:
        assert cpus is None and cpusets.pinned(["x"], cpus) == ["x"] and none.gate_args() == ()


def test_the_launcher_runs_the_command_on_the_cpus_and_refuses_a_bad_list() -> None:
    cpu = min(os.sched_getaffinity(0))
    probe = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    done = subprocess.run(cpusets.pinned(probe, (cpu,)), capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"[{cpu}]", done.stderr
    bad = subprocess.run([sys.executable, "-m", "ds4ci.calibrate.pin", "x", "--", *probe], capture_output=True,
                         text=True, check=False, timeout=60)
    assert bad.returncode == 2 and "cannot run on CPUs 'x'" in bad.stderr

