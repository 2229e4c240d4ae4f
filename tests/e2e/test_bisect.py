"""``ds4ci bisect`` end to end: a real git history of a tiny project whose build makes the server under test (the
bundled simulator, behind a wrapper the build writes), one commit planting a fault (from it on, the built server
leaks an approximate verifier) and one commit that does not build. The real CLI, the real gate in the sandbox
(where bubblewrap runs), one scratch worktree; each step's bundle verifies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import DS4CI, Workspace, sha256

from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.e2e

BUILD = """#!/bin/sh
set -e
if [ -e broken ]; then echo "error: broken.c:1: this commit does not compile" >&2; exit 1; fi
mkdir -p out
faults=""
if [ -e faults.txt ]; then faults="$(cat faults.txt)"; fi
printf '#!/bin/sh\\nDS4SIM_FAULTS=%s exec "%s" -m ds4ci.simulator "$@"\\n' "$faults" "$PYTHON" > out/dflash_server
chmod +x out/dflash_server
echo "built out/dflash_server"
"""
PLANTED, BROKEN, COMMITS = 9, 11, 16  # positions in the history: 0 the good end, 15 the bad end


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def tiny_project(root: Path, ws: Workspace) -> list[str]:
    """A repository of COMMITS commits (SHAs oldest first) with ds4ci.toml at its top."""
    repo = root / "engine"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "build.sh").write_text(BUILD.replace("$PYTHON", sys.executable))
    (repo / "build.sh").chmod(0o755)
    (repo / ".gitignore").write_text("out/\n")
    prompt = ws.prompts[0]
    (repo / "ds4ci.toml").write_text(
        f'[gate]\ntarget = "{ws.target}"\ntarget_sha256 = "{sha256(ws.target)}"\n'
        f'draft = "{ws.draft}"\ndraft_sha256 = "{sha256(ws.draft)}"\n'
        f'prompts = [{{file = "{prompt}", sha256 = "{sha256(prompt)}"}}]\n'
        f'widths = [2, 3]\nmax_tokens = 64\nstartup_timeout = 30\nrequest_timeout = 30\nstop_timeout = 3\n'
        f'evidence_dir = "{root / "evidence"}"\n'
        '[build]\ncommand = "./build.sh"\ncwd = "."\ntimeout = 120\nserver_bin = "out/dflash_server"\n'
        '[runners.box]\n')
    shas = []
    for position in range(COMMITS):
        (repo / "engine.c").write_text(f"/* revision {position} */\n")
        subject = f"engine: revision {position}"
        if position == PLANTED:
            (repo / "faults.txt").write_text("leak-fused-verify")
            subject = "ds4: fuse the verify path"
        if position == BROKEN:
            (repo / "broken").write_text("")
        if position == BROKEN + 1:
            (repo / "broken").unlink()
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", subject)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return shas


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox: {sandbox.refusal()}")
def test_bisect_finds_the_planted_commit_in_five_gate_runs_skipping_one_that_does_not_build(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "files")
    shas = tiny_project(tmp_path, ws)
    repo = tmp_path / "engine"
    before = _git(repo, "status", "--porcelain", "--untracked-files=all")
    summary = tmp_path / "summary.md"
    proc = subprocess.run(
        [DS4CI, "bisect", "--good", shas[0], "--runner", "box", "--json"], cwd=repo,
        env={**ws.env(DS4CI_CONTAINMENT="sandbox"), "GITHUB_STEP_SUMMARY": str(summary)},
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "found" and doc["exit_code"] == 0
    assert doc["first_failing"] == {"sha": shas[PLANTED], "subject": "ds4: fuse the verify path"}
    assert doc["last_passing"]["sha"] == shas[PLANTED - 1]
    assert len(doc["steps"]) <= 5 and doc["expected_steps"] == 4
    assert [s["sha"] for s in doc["skipped"]] == [shas[BROKEN]]
    assert "does not build" in doc["skipped"][0]["reason"]
    assert {d["q"] for d in doc["differences"]} == {2, 3}
    assert all(isinstance(d["position"], int) for d in doc["differences"])
    assert "about 4 gate runs" in proc.stderr and "the first step took" in proc.stderr
    # every step's bundle is kept, sealed, and verifies with its own verdict (a skipped build's is a fail)
    for step in doc["steps"]:
        assert step["evidence"] is not None, step
        verified = subprocess.run([DS4CI, "verify", step["evidence"]], capture_output=True, text=True, timeout=120,
                                  check=False)
        assert verified.returncode == (0 if step["outcome"] == "pass" else 1), (step, verified.stderr[-2000:])
        results = json.loads((Path(step["evidence"]) / "results.json").read_text())
        assert results["revisions"]["head"]["sha"] == step["sha"]
        assert results["containment"] == "sandbox"
    # nothing of the user's working tree changed, and no scratch worktree outlives the run
    assert _git(repo, "status", "--porcelain", "--untracked-files=all") == before
    assert _git(repo, "worktree", "list").count("\n") == 0
    # the job summary lists every step; the comment section renders the answer in one line
    listed = summary.read_text()
    assert all(s["sha"][:7] in listed for s in doc["steps"]), listed
    result = tmp_path / "bisect.json"
    result.write_text(proc.stdout)
    comment = subprocess.run([DS4CI, "report", doc["steps"][0]["evidence"], "--bisect", str(result)],
                             capture_output=True, text=True, timeout=120, check=False)
    assert comment.returncode == 0, comment.stderr
    short = shas[PLANTED][:7]
    assert f"First failing commit: `{short}` ds4: fuse the verify path; parity at q=2 breaks at position" in comment.stdout
    assert f"last passing: `{shas[PLANTED - 1][:7]}`" in comment.stdout
    assert "role=bisect" in comment.stdout


def two_commits(root: Path, ws: Workspace, second: str) -> list[str]:
    """The tiny project with one commit after the good end: ``second`` is "clean", "broken" or "planted"."""
    shas = tiny_project(root, ws)[:1]
    repo = root / "engine"
    _git(repo, "reset", "-q", "--hard", shas[0])
    if second == "broken":
        (repo / "broken").write_text("")
    (repo / "engine.c").write_text(f"/* {second} */\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", second)
    return [*shas, _git(repo, "rev-parse", "HEAD")]


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox: {sandbox.refusal()}")
@pytest.mark.parametrize(("second", "code", "says"), [
    ("clean", 1, "the bad end passes"), ("broken", 3, "the bad end could not be judged (does not build"),
])
def test_a_bad_end_that_passes_is_not_found_and_one_that_does_not_build_is_no_verdict(
    tmp_path: Path, second: str, code: int, says: str,
) -> None:
    ws = Workspace.create(tmp_path / "files")
    shas = two_commits(tmp_path, ws, second)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    evidence = tmp_path / "elsewhere"
    proc = subprocess.run([DS4CI, "bisect", "--good", shas[0], "--runner", "box", "--evidence-dir", str(evidence)],
                          cwd=tmp_path / "engine",
                          env={**ws.env(DS4CI_CONTAINMENT="sandbox"), "TMPDIR": str(scratch)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == code, proc.stdout + proc.stderr[-3000:]
    assert says in proc.stdout and "Traceback" not in proc.stderr
    assert shas[1][:12] in proc.stdout
    assert len(list((evidence / ("runs" if code == 1 else "failed")).iterdir())) == 1
    assert not [p for p in scratch.iterdir() if p.name.startswith("ds4ci-bisect-")]  # the scratch tree is gone


def test_usage_errors_are_2_before_any_gate_runs(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "files")
    shas = tiny_project(tmp_path, ws)
    repo = tmp_path / "engine"
    cases = {
        ("--runner", "box"): "no --good and no base ref",
        ("--good", "no-such-ref", "--runner", "box"): "does not name a commit",
        ("--good", shas[3], "--bad", shas[1], "--runner", "box"): "nothing to search",
        ("--good", shas[0], "--runner", "nobody"): "no [runners.nobody] table",
    }
    for args, says in cases.items():
        proc = subprocess.run([DS4CI, "bisect", *args], cwd=repo, env=ws.env(), capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 2 and says in proc.stderr, (args, proc.stderr)
    token = subprocess.run([DS4CI, "bisect", "--good", shas[0], "--runner", "box"], cwd=repo, capture_output=True,
                           env={**ws.env(), "GITHUB_ACTIONS": "true", "GITHUB_TOKEN": "x"}, text=True, timeout=120,
                           check=False)
    assert token.returncode == 2 and "GITHUB_TOKEN is set" in token.stderr, token.stderr
    assert not (tmp_path / "evidence").exists()


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox: {sandbox.refusal()}")
def test_an_interrupt_mid_step_is_no_verdict_keeps_every_finished_bundle_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    import signal
    import time

    from gatekit import evidence_listing, processes_mentioning

    ws = Workspace.create(tmp_path / "files")
    shas = tiny_project(tmp_path, ws)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([DS4CI, "bisect", "--good", shas[0], "--runner", "box", "--json"], cwd=tmp_path / "engine",
                            env={**ws.env(DS4CI_CONTAINMENT="sandbox"), "TMPDIR": str(scratch)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    evidence = tmp_path / "evidence"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the first step is sealed and the second one's attempt has begun
        listing = evidence_listing(evidence) if evidence.exists() else {}
        if len(listing.get("runs", [])) + len(listing.get("failed", [])) == 1 and listing.get("attempts"):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the second step never started")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stderr[-3000:]
    doc = json.loads(stdout)
    assert doc["verdict"] == "no_verdict" and "interrupted" in doc["reason"] and len(doc["steps"]) == 1
    finished = doc["steps"][0]["evidence"]
    assert subprocess.run([DS4CI, "verify", finished], capture_output=True, timeout=120, check=False).returncode == 0
    assert not processes_mentioning(str(tmp_path))  # no gate, build or server outlives the bisect
    listing = evidence_listing(evidence)  # the interrupted step's gate was stopped and sealed its attempt too
    assert not listing["attempts"] and len(listing["runs"]) + len(listing["failed"]) == 2, listing
    (stopped,) = [evidence / "failed" / name for name in listing["failed"] if str(evidence / "failed" / name) != finished]
    assert "interrupted" in " ".join(json.loads((stopped / "results.json").read_text())["reasons"])
    assert not [p for p in scratch.iterdir() if p.name.startswith("ds4ci-bisect-")]
    assert _git(tmp_path / "engine", "worktree", "list").count("\n") == 0
