"""Shared helpers for tests that run the real ``ds4ci gate`` against real server processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4ci.supervisor import sandbox

BIN = Path(sys.executable).parent
DS4CI = str(BIN / "ds4ci")
FOREIGN_SERVER = Path(__file__).parent / "servers" / "foreign_server.py"


CLI = [sys.executable, "-c", "from ds4ci.cli import main; main()"]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``ds4ci ARGS`` as a user runs it, in ``cwd``."""
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sim_wrapper(directory: Path) -> Path:
    """An executable 'server binary' that runs the bundled simulator with this interpreter."""
    path = directory / "sim-server"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ds4ci.simulator "$@"\n')
    path.chmod(0o755)
    return path


@dataclass
class GateRun:
    code: int
    stdout: str
    stderr: str
    results: dict[str, Any] | None
    evidence_dir: Path

    def reasons(self) -> str:
        assert self.results is not None, self.stderr
        return "\n".join(self.results["reasons"])


@dataclass
class Workspace:
    """Pinned model, draft and prompt files plus a server binary, in one temporary directory."""

    root: Path
    server: Path
    target: Path
    draft: Path
    prompts: list[Path]
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, server: Path | None = None, prompts: int = 1) -> Workspace:
        models = root / "models"
        models.mkdir(parents=True, exist_ok=True)
        target = models / "target.gguf"
        draft = models / "draft.gguf"
        target.write_bytes(b"GGUF test target" + bytes(range(256)) * 8)
        draft.write_bytes(b"GGUF test draft" + bytes(range(255, -1, -1)) * 4)
        prompt_files = []
        for i in range(prompts):
            p = models / f"prompt{i}.txt"
            p.write_text(f"Prompt number {i}: explain speculative decoding rollbacks in detail.\n")
            prompt_files.append(p)
        return cls(root, server or sim_wrapper(root), target, draft, prompt_files)

    def args(self, **overrides: Any) -> list[str]:
        values: dict[str, Any] = {
            "server-bin": self.server,
            "target": self.target,
            "target-sha256": sha256(self.target),
            "draft": self.draft,
            "draft-sha256": sha256(self.draft),
            "evidence-dir": self.root / "evidence",
            "results-out": self.root / "results.json",
            "runner": "test-runner",
            "widths": "2,3,4",
            "max-tokens": 64,
            "startup-timeout": 30,
            "request-timeout": 30,
            "stop-timeout": 3,
        }
        values.update({k.replace("_", "-"): v for k, v in overrides.items()})
        out: list[str] = []
        for key, value in values.items():
            if value is None:
                continue
            out += [f"--{key}", str(value)]
        if "prompt-file" not in values:
            for prompt in self.prompts:
                out += ["--prompt-file", str(prompt), "--prompt-sha256", sha256(prompt)]
        return out

    def env(self, faults: str | None = None, **extra: str) -> dict[str, str]:
        """This workspace's gate command's environment. Its server is a Python program of this checkout run by this
        venv's interpreter (the simulator's wrapper, a fault server): the sandbox shows that interpreter and checkout
        read-only through DS4CI_SANDBOX_RO_PATHS, as a runner's [sandbox] ro_paths would, for this command only."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_", "LUCE_", "DS4SIM_"))}
        env = sandbox.runtime_environment(env)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env["XDG_CACHE_HOME"] = str(self.root / "cache")
        if faults:
            env["DS4SIM_FAULTS"] = faults
        env.update(self.extra_env)
        env.update(extra)
        return env

    def checkout(self) -> Path:
        """Where the gate runs, as on a runner: a clean git checkout of its own (never this repository's, whose
        uncommitted edits would make every run "built from a modified tree")."""
        path = self.root / "checkout"
        if not path.exists():
            git_repo(path, {"server.c": "/* the server under test */\n"})
        return path

    def gate(self, *extra_args: str, faults: str | None = None, env: dict[str, str] | None = None,
             timeout: float = 180, **overrides: Any) -> GateRun:
        proc = subprocess.run(
            [DS4CI, "gate", *self.args(**overrides), *extra_args], cwd=self.checkout(),
            env=env or self.env(faults), capture_output=True, text=True, timeout=timeout, check=False,
        )
        results_path = Path(overrides.get("results_out") or self.root / "results.json")
        results = json.loads(results_path.read_text()) if results_path.is_file() else None
        if results_path.is_file():
            results_path.unlink()  # each run must write its own
        return GateRun(proc.returncode, proc.stdout, proc.stderr, results, self.root / "evidence")


def git_repo(path: Path, files: dict[str, str]) -> str:
    """A real git repository at ``path`` with one commit of ``files``; its head SHA."""
    path.mkdir(parents=True)
    git = ["git", "-C", str(path), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for name, text in files.items():
        (path / name).write_text(text)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "commit"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def processes_mentioning(marker: str) -> list[str]:
    """Command lines of live (non-zombie) processes whose argv mentions marker (e.g. a tmp path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


def evidence_listing(evidence_dir: Path) -> dict[str, list[str]]:
    return {
        part: sorted(p.name for p in (evidence_dir / part).iterdir()) if (evidence_dir / part).exists() else []
        for part in ("attempts", "runs", "failed")
    }
