"""Starting ``ds4ci-sim`` as a real subprocess on a free loopback port, for any test.

    from tests.simproc import start_sim, make_models, spec_env, ask, stop_sim

    target, draft = make_models(tmp_path)
    sim = start_sim(tmp_path, env=spec_env(draft, q=3))      # waits for /health 200
    response, lines = ask(sim, "hello", max_tokens=96)        # lines = its stderr window
    stop_sim(sim)                                             # TERM, then KILL of its group

``start_sim`` returns a ``Sim`` (a NamedTuple: ``proc, port, stderr_path, stdout_path``). The
simulator runs in its own process group (``start_new_session``) so ``stop_sim``/``kill_group``
reach helpers it forks into that group. Requests from ``chat_body`` state every sampler field
(greedy, neutral penalties), so the model card's defaults never apply unless a test omits them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import requests

# Inherited policy would make a test depend on the shell it runs in.
_STRIPPED_PREFIXES = ("DFLASH_", "LUCE_", "DS4SIM_", "GGML_")

TRACE = re.compile(
    r"^\[ds4-exact-verify-trace\] reference_exact=(?P<ref>[01]) speculation=(?P<spec>[01]) "
    r"n=(?P<n>\d+) ids=\[(?P<ids>[^\]]*)\]$"
)
SUMMARY = re.compile(
    r"^\[ds4-spec\] gen=(?P<gen>\d+) steps=(?P<steps>\d+) matched=(?P<matched>\d+) offered=(?P<offered>\d+) "
    r"mean_accept=(?P<a>\d+\.\d\d)/(?P<b>\d+\.\d\d) q_cap=(?P<q>\d+) full_snap=(?P<snap>[01])(?P<extra>( \S+)*)$"
)
BANNER_PREFIX = "[ds4-spec] reference-exact verifier: "


class Sim(NamedTuple):
    proc: subprocess.Popen[bytes]
    port: int
    stderr_path: Path
    stdout_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def out(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")


class SimExited(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sim_command() -> list[str]:
    """The simulator as the gate would start it; ``-m`` works in every install."""
    return [sys.executable, "-m", "ds4ci.simulator"]


def make_models(tmp_path: Path) -> tuple[Path, Path]:
    """Small deterministic target and draft files (their bytes key the toy models)."""
    target = tmp_path / "target.gguf"
    draft = tmp_path / "draft.gguf"
    if not target.exists():
        target.write_bytes(b"GGUF test target " + bytes(range(256)) * 8)
    if not draft.exists():
        draft.write_bytes(b"GGUF test draft " + bytes(range(255, -1, -1)) * 4)
    return target, draft


def common_env() -> dict[str, str]:
    """The fixed policy every arm gets: trace on, fixed width, enough MMVQ columns."""
    return {"DFLASH_DS4_EXACT_VERIFY_TRACE": "1", "DFLASH_DS4_ADAPTIVE_WIDTH": "0", "LUCE_MMVQ_MAX_NCOLS": "8"}


def spec_env(draft: Path, q: int, *, reference_exact: bool = True) -> dict[str, str]:
    env = {**common_env(), "DFLASH_DS4_SPEC": "1", "DFLASH_DS4_DRAFT": str(draft), "DFLASH_DS4_SPEC_Q": str(q)}
    if reference_exact:
        env["DFLASH_DS4_SPEC_REFERENCE_EXACT"] = "1"
    return env


def child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """os.environ without policy variables, plus ``env``. The per-request override files are read
    from a directory that does not exist (``env`` may name another), never from the shared /tmp."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_STRIPPED_PREFIXES)}
    base["DS4SIM_OVERRIDE_DIR"] = "/nonexistent/ds4ci-sim-overrides"
    return {**base, **(env or {})}


def start_sim(
    tmp_path: Path,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] | None = None,
    *,
    target: Path | None = None,
    port: int | None = None,
    wait: bool = True,
    timeout: float = 20.0,
) -> Sim:
    """Start the simulator; ``env`` is added to a copy of os.environ without DFLASH_/LUCE_/DS4SIM_
    variables; ``args`` replaces the default flags after TARGET. Waits for /health 200 unless
    ``wait=False`` (then check the process yourself)."""
    if target is None:
        target, _ = make_models(tmp_path)
    port = free_port() if port is None else port
    flags = (
        list(args)
        if args is not None
        else [
            "--host", "127.0.0.1", "--port", str(port), "--max-ctx", "4096", "--chunk", "512",
            "--target-device", "hip:0", "--ds4-fused-decode", "--ds4-prefill", "exact",
        ]
    )
    stamp = f"{port}-{time.monotonic_ns()}"
    stderr_path = tmp_path / f"sim-{stamp}.log"
    stdout_path = tmp_path / f"sim-{stamp}.out"
    with stderr_path.open("wb") as stderr, stdout_path.open("wb") as stdout:
        proc = subprocess.Popen(
            [*sim_command(), str(target), *flags],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=child_env(env),
            start_new_session=True,
        )
    sim = Sim(proc, port, stderr_path, stdout_path)
    if wait:
        wait_ready(sim, timeout)
    return sim


def wait_ready(sim: Sim, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sim.proc.poll() is not None:
            raise SimExited(f"simulator exited {sim.proc.returncode} before ready:\n{sim.log()}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"{sim.url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.02)
    kill_group(sim)
    raise TimeoutError(f"simulator not ready within {timeout}s:\n{sim.log()}")


def wait_log(sim: Sim, text: str, timeout: float = 20.0) -> None:
    """Wait until the simulator's stderr contains ``text`` (e.g. its start-up line, after which
    its signal handlers are installed)."""
    deadline = time.monotonic() + timeout
    while text not in sim.log():
        if sim.proc.poll() is not None or time.monotonic() > deadline:
            raise SimExited(f"simulator never logged {text!r} (exit {sim.proc.poll()}):\n{sim.log()}")
        time.sleep(0.02)


def chat_body(prompt: str, max_tokens: int = 96, seed: int = 1234, **fields: Any) -> dict[str, Any]:
    """A request that states every sampler field (greedy, neutral penalties); ``fields`` add to or
    replace them, and a field given as ``None`` is left out (so the model card's default applies)."""
    body: dict[str, Any] = {
        "model": "target",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "top_p": 1,
        "top_k": 0,
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "repetition_penalty": 1,
        "seed": seed,
        "max_tokens": max_tokens,
        "stream": False,
    }
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def ask(
    sim: Sim, prompt: str, max_tokens: int = 96, seed: int = 1234, timeout: float = 30.0, **fields: Any
) -> tuple[requests.Response, list[str]]:
    """One completion and the stderr lines the simulator wrote until it was answered."""
    start = sim.stderr_path.stat().st_size
    response = requests.post(
        f"{sim.url}/v1/chat/completions", json=chat_body(prompt, max_tokens, seed, **fields), timeout=timeout
    )
    with sim.stderr_path.open("rb") as handle:
        handle.seek(start)
        window = handle.read().decode("utf-8", errors="replace")
    return response, window.splitlines()


def traces(lines: Sequence[str]) -> list[re.Match[str]]:
    return [m for m in (TRACE.match(line) for line in lines) if m]


def trace_ids(match: re.Match[str]) -> list[int]:
    return [int(x) for x in match.group("ids").split()]


def summaries(lines: Sequence[str]) -> list[str]:
    return [line for line in lines if line.startswith("[ds4-spec] gen=")]


def banners(lines: Sequence[str]) -> list[str]:
    return [line for line in lines if line.startswith(BANNER_PREFIX)]


def kill_group(sim: Sim) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sim.proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        sim.proc.wait(timeout=10)


def stop_sim(sim: Sim, timeout: float = 10.0) -> int | None:
    """SIGTERM the simulator, wait for it, then KILL its whole group (helpers included).
    Returns the simulator's own exit status after TERM, or None if TERM did not end it."""
    code: int | None = None
    if sim.proc.poll() is None:
        sim.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = sim.proc.wait(timeout=timeout)
    else:
        code = sim.proc.returncode
    kill_group(sim)
    return code
