"""A speculative arm that crashed while target-only passed, said as that in the run's reason.

The gate writes how a server ended in its own words (``gate.server``): ``reference-exact q=3: request failed
(BrokenAnswer; server exited with code -6 (SIGABRT)): GGML_ASSERT(...) failed``, ``reference-exact q=3: server
exited with code 1 before it was ready``, ``reference-exact q=3: GET /props failed: ... (server exited with
...)``. Such a reason, when target-only passed, is the run's one fact a reader needs first: "target-only passed;
reference-exact q=3 crashed: ...". The quoted log lines below the first line are kept as they are.
"""

from __future__ import annotations

import re

_CRASH = re.compile(r"^(?P<arm>reference-exact q=\d+): (?P<what>[^\n]*server exited with [^\n]*)")


def crashed_arm(reason: str) -> str | None:
    """The arm (``reference-exact q=3``) whose server a reason says exited under the gate, else None."""
    match = _CRASH.match(reason)
    return match.group("arm") if match else None


def run_reason(reason: str, target_passed: bool) -> str:
    """A width's reason as the run's: "target-only passed; <arm> crashed: ..." for a crash after target-only passed."""
    match = _CRASH.match(reason)
    if not target_passed or match is None:
        return reason
    return f"target-only passed; {match.group('arm')} crashed: {match.group('what')}{reason[match.end():]}"
