"""What a server's lifecycle record turns into: one true sentence per fact, each pid once.

The records are shaped like the lifecycle.json a gate run seals (captured from a simulator server that
ignored SIGTERM and never became ready: ``DS4SIM_FAULTS=ignore-sigterm DS4SIM_STARTUP_DELAY=100``,
``--startup-timeout 2 --stop-timeout 2``).
"""

from __future__ import annotations

import copy
from typing import Any

from ds4ci.judging.judge import lifecycle_issues

HUNG_START: dict[str, Any] = {
    "containment": "sandbox",
    "error": "target-only: server did not answer /health within 2 s (--startup-timeout)\nlast 7 line(s) of stderr:\n"
             "[stderr] ds4ci-sim: ignoring SIGTERM (fault ignore-sigterm)",
    "key": "target-only", "log_cap_bytes": 536870912, "log_flood": {"stderr": False, "stdout": False},
    "overrides_after": [], "pid": 9985, "port": 37083, "q": None, "ready_s": None, "requests": [],
    "stop": {"exit_code": -9, "in_flight": False, "needed_kill": True, "stop_s": 2.791, "timeout_s": 2.0},
    "swept": ["pid 9985: server"],
}


def test_a_hung_start_is_not_called_a_kill_in_flight_nor_lists_the_server_as_its_own_child() -> None:
    errors, warnings = lifecycle_issues("target-only", HUNG_START)
    assert errors == [HUNG_START["error"]]
    assert warnings == ["target-only: did not exit within 2.0 s of SIGTERM and was killed with SIGKILL"]
    assert not any("in flight" in w for w in [*errors, *warnings])
    assert sum(w.count("9985") for w in [*errors, *warnings]) == 0


def test_a_kill_with_a_request_in_flight_is_an_error_and_a_left_helper_is_listed() -> None:
    life = copy.deepcopy(HUNG_START)
    life["stop"]["in_flight"] = True
    life["swept"] = ["pid 9985: server", "pid 9990: helper"]
    errors, warnings = lifecycle_issues("target-only", life)
    assert "target-only: killed with SIGKILL while a request was in flight" in errors
    assert warnings == [
        "target-only: 1 process(es) the server started were still running after it stopped and were killed: "
        "pid 9990: helper"
    ]
