"""A server that ends before ds4ci enters its network namespace is reported by how it ended.

The sandbox reports the command's end on a pipe; on a loaded machine ds4ci can poll before that report
arrives, then try to enter the namespace of a process that is already gone. The reason must still be
the server's own end (here: bwrap could not exec it), not the namespace ds4ci could not enter.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ds4ci.errors import NoVerdictError
from ds4ci.gate.server import Server, ServerSettings
from ds4ci.supervisor import Child, sandbox, sandboxed


class _ReportReadLate:
    """A real sandboxed child whose first poll answers "running" after it has in fact ended."""

    def __init__(self, child: Child) -> None:
        self._child, self._late = child, True

    def poll(self) -> int | None:
        if self._late:
            self._late = False
            assert self._child.wait(10) is not None, "the command the sandbox cannot exec should end at once"
            return None
        return self._child.poll()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._child, name)


def test_an_end_before_the_namespace_is_entered_is_reported_as_that_end(tmp_path: Path) -> None:
    if sandbox.refusal() is not None:
        pytest.skip(f"bubblewrap does not run here: {sandbox.refusal()}")
    program = tmp_path / "bin" / "server"
    program.parent.mkdir()
    program.write_text(f"#!{tmp_path / 'not-in-the-sandbox' / 'python3'}\n")
    program.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()  # Server.start would make it; the test starts the child itself
    settings = ServerSettings(
        binary=program, target=tmp_path / "target.gguf", target_device="cpu", max_ctx=256, chunk=64, args=(),
        startup_timeout_s=20, request_timeout_s=5, stop_timeout_s=5, log_cap_bytes=1 << 20,
    )
    server = Server(settings, {}, logs, lambda _line: None, "target-only")
    with sandboxed.spawn(
        [str(program)], sandbox.Policy(), sandbox.View(ro=(program.parent,), own_network=True),
        stdout=server.stdout_path, stderr=server.stderr_path, start_timeout=20,
    ) as child:
        server.child = _ReportReadLate(child)  # type: ignore[assignment]
        with pytest.raises(NoVerdictError) as raised:
            server._wait_ready(time.monotonic())
    reason = str(raised.value)
    assert "could not be started in the sandbox, it never ran" in reason and "bwrap: execvp" in reason, reason
    assert "network namespace" not in reason.splitlines()[0], reason
