"""``ds4ci demo``: the gate on the bundled simulator, once passing and once catching a leak.

Needs no GPU. The second run leaks approximate (fused) verification into the speculative arm only,
through the simulator's ``leak-fused-verify`` fault switch, and the gate must call it a fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO, cast

from ds4ci.errors import EXIT_FAIL, EXIT_PASS, UsageError
from ds4ci.gate.run import GateOutcome, run_gate
from ds4ci.log import Logger
from ds4ci.options import config
from ds4ci.report import table

DEMO_PROMPT = (
    "Explain, step by step, why reference-exact speculative decoding must produce exactly the same "
    "token IDs as plain greedy decoding, and what a rollback snapshot is for.\n"
)


def make_demo_inputs(workspace: Path) -> dict[str, Any]:
    """Small deterministic target, draft and prompt files; returns gate overrides that pin them."""
    models = workspace / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / "target.gguf"
    draft = models / "draft.gguf"
    prompt = models / "prompt.txt"
    target.write_bytes(b"GGUF demo target " + bytes(range(256)) * 64)
    draft.write_bytes(b"GGUF demo draft " + bytes(reversed(range(256))) * 16)
    prompt.write_text(DEMO_PROMPT, encoding="utf-8")
    source = make_demo_source(workspace / "source")

    def sha(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    return {
        "server": "simulator",  # ds4ci's bundled simulator, run by this interpreter (named here, never by a file)
        "target_device": "cpu:0",  # the simulator needs no GPU: nothing says hip:0 on a machine without one
        "target": target,
        "target_sha256": sha(target),
        "draft": draft,
        "draft_sha256": sha(draft),
        "prompt_files": [prompt],
        "prompt_sha256s": [sha(prompt)],
        "widths": "2,3,4",
        "startup_timeout": 60.0,
        "request_timeout": 60.0,
        "stop_timeout": 5.0,
        "hash_cache_path": workspace / "hash-cache.json",
        "source_dir": source,
        "base_ref": "main" if source is not None else None,
    }


def make_demo_source(path: Path) -> Path | None:
    """A tiny git repository standing in for the server's source, so the demo records revisions
    (head, base, merge base, synthetic merge) like a real PR run. Skipped when git is missing."""
    git = shutil.which("git")
    if git is None:
        return None
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "ds4ci demo", "GIT_AUTHOR_EMAIL": "demo@ds4ci.invalid",
           "GIT_COMMITTER_NAME": "ds4ci demo", "GIT_COMMITTER_EMAIL": "demo@ds4ci.invalid", "GIT_CONFIG_NOSYSTEM": "1"}

    def run(*args: str) -> None:
        subprocess.run([git, "-C", str(path), *args], env=env, check=True, capture_output=True, timeout=60)

    run("init", "-q", "-b", "main")
    (path / "server.c").write_text("/* reference-exact verifier */\n", encoding="utf-8")
    run("add", "server.c")
    run("commit", "-q", "-m", "base: server source")
    run("checkout", "-q", "-b", "pr")
    (path / "verify.c").write_text("/* sequential target verification */\n", encoding="utf-8")
    run("add", "verify.c")
    run("commit", "-q", "-m", "pr: reference-exact speculation")
    return path


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


TEMPORARY = "<demo workspace>"  # stands for a temporary workspace's path, which is gone once the demo ends


class _Shown(io.TextIOBase):
    """A stream that writes through *show* (which hides the temporary workspace's path) to *target*."""

    def __init__(self, target: TextIO, show: Callable[[str], str]) -> None:
        super().__init__()
        self._target, self._show = target, show

    def write(self, text: str) -> int:
        self._target.write(self._show(text))
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()


def _shower(workspace: Path, temporary: bool) -> Callable[[str], str]:
    """Paths under a temporary workspace are printed as ``<demo workspace>/...``: they do not outlive the demo."""
    if not temporary:
        return lambda text: text
    names = sorted({str(workspace), str(workspace.resolve())}, key=len, reverse=True)

    def show(text: str) -> str:
        for name in names:
            text = text.replace(name, TEMPORARY)
        return text

    return show


def _run(
    workspace: Path, inputs: dict[str, Any], runner: str, faults: str | None, show: Callable[[str], str]
) -> GateOutcome:
    overrides = {**inputs, "runner": runner, "evidence_dir": workspace / "evidence"}
    cfg = config.load(None, overrides)
    with _env("DS4SIM_FAULTS", faults):
        outcome = run_gate(cfg, Logger.from_env(cast(TextIO, _Shown(sys.stderr, show))))
    outcome.write_results(workspace / f"{runner}.results.json")
    return outcome


def run_demo(keep: Path | None) -> int:
    if keep is not None:
        if keep.exists():
            raise UsageError(f"--keep {keep}: expected a new directory, found an existing path")
        keep.mkdir(parents=True)
        return _demo(keep, temporary=False)
    with tempfile.TemporaryDirectory(prefix="ds4ci-demo-") as tmp:
        return _demo(Path(tmp), temporary=True)


def _demo(workspace: Path, temporary: bool) -> int:
    inputs = make_demo_inputs(workspace)
    show = _shower(workspace, temporary)
    print("== 1/2: reference-exact speculation at q=2,3,4 against target-only greedy (expected: PASS)")
    good = _run(workspace, inputs, "demo-sim", None, show)
    print(show(table.render(good.results)))
    print()
    print("== 2/2: approximate fused verification leaked into the speculative arm (expected: caught, FAIL)")
    leaked = _run(workspace, inputs, "demo-sim-leak", "leak-fused-verify", show)
    print(show(table.render(leaked.results)))
    print()
    passed = good.exit_code == EXIT_PASS
    caught = leaked.exit_code == EXIT_FAIL
    print(f"demo: clean run {'passed' if passed else 'DID NOT PASS'}; "
          f"leaked approximate verifier {'was caught' if caught else 'WAS NOT CAUGHT'}")
    if temporary:
        print(f"demo workspace: {TEMPORARY} was temporary and is removed now; keep one with --keep DIR")
    else:
        print(f"demo workspace: {workspace}")
    return 0 if passed and caught else 1
