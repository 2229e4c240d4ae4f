"""``ds4ci dispatch-check``: input validation (exit 2, clear messages) and the pinned-head refusal.

The CLI runs as a real process; the PR's head comes from the stateful fake GitHub API over HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakegithub import READ_TOKEN, WRITE_TOKEN, FakeGitHub

from ds4ci.github import dispatch
from ds4ci.options.runners import RunnerSpec

DS4CI = str(Path(sys.executable).parent / "ds4ci")
HEAD = "a" * 40
OTHER = "b" * 40
# The runner table of the examples' ds4ci.toml, as `ds4ci config runners --json` prints it.
TABLE = json.dumps([{"name": "gfx1151", "labels": ["self-hosted", "rocm", "gfx1151"], "queue": "gfx1151", "role": "gate"},
                    {"name": "sm86", "labels": ["self-hosted", "gpu", "sm86"], "queue": "sm86", "role": "gate"}])


def _check(*args: str, event: str = "workflow_dispatch", env: dict[str, str] | None = None,
           tmp: Path | None = None, table: str | None = TABLE) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    out = (tmp / "out.txt") if tmp else None
    base.update({"GITHUB_EVENT_NAME": event, "GITHUB_REPOSITORY": "acme/engine", **(env or {})})
    if out is not None:
        base["GITHUB_OUTPUT"] = str(out)
    if table is not None and "--runner-table" not in args and "--config" not in args:
        args = (*args, "--runner-table", table)
    proc = subprocess.run([DS4CI, "dispatch-check", *args], capture_output=True, text=True, env=base, timeout=60,
                          cwd=tmp or Path(__file__).parent)
    values = {}
    if out is not None and out.exists():
        values = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return proc, values


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pr", "12a", "--head-sha", HEAD], "pr: expected a pull request number"),
        (["--pr", "0", "--head-sha", HEAD], "pr: expected a pull request number"),
        (["--pr", "-3", "--head-sha", HEAD], "pr: expected a pull request number"),
        (["--pr", "7", "--head-sha", HEAD[:39]], "head-sha: expected the full 40-hex"),
        (["--pr", "7", "--head-sha", "g" * 40], "head-sha: expected the full 40-hex"),
        (["--pr", "7", "--head-sha", "main"], "head-sha: expected the full 40-hex"),
        (["--pr", "7", "--head-sha", HEAD, "--widths", "1,2"], "widths"),
        (["--pr", "7", "--head-sha", HEAD, "--widths", "2,,3"], "widths"),
        (["--pr", "7", "--head-sha", HEAD, "--widths", "2,2"], "listed twice"),
        (["--pr", "7", "--head-sha", HEAD, "--runners", "gfx1151,mi300"], "unknown runner(s) mi300"),
        (["--pr", "7", "--head-sha", HEAD, "--runners", "sm86,sm86"], "listed twice"),
        (["--pr", "7"], "workflow_dispatch needs head-sha"),
        (["--head-sha", HEAD], "workflow_dispatch needs pr"),
        (["--pr", "7", "--head-sha", HEAD, "--runner-table", "[{\"name\": \"x\"}]"], "runner-table[0]"),
        (["--pr", "7", "--head-sha", HEAD, "--runner-table", "[{\"name\": \"x\", \"labels\": [], \"queue\": \"x\"}]"],
         "runner-table[0].labels"),
    ],
)
def test_bad_dispatch_input_exits_2_with_a_clear_message(args: list[str], message: str) -> None:
    proc, _ = _check(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_pinned_head_verified_and_plan_written(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.add_pull(7, HEAD)
    proc, out = _check("--pr", "7", "--head-sha", HEAD.upper(), "--widths", " 3,2 ", "--runners", "sm86",
                       env={"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": READ_TOKEN}, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out["pr"] == "7" and out["head-sha"] == HEAD and out["widths"] == "3,2"
    assert out["runners"] == "sm86" and out["fork"] == "false"
    assert json.loads(out["matrix"]) == {"include": [{"runner": "sm86", "labels": ["self-hosted", "gpu", "sm86"],
                                                      "queue": "sm86", "role": "gate"}]}
    assert fake.count("GET", "/pulls/7") == 1


def test_run_refused_when_the_pr_moved_since_review(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.add_pull(7, OTHER)
    proc, out = _check("--pr", "7", "--head-sha", HEAD,
                       env={"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN}, tmp=tmp_path)
    assert proc.returncode == 2
    assert f"head is now {OTHER}, not the pinned {HEAD}" in proc.stderr
    assert out == {}  # nothing for later jobs to run with


def test_unknown_pr_is_a_usage_error(fake: FakeGitHub) -> None:
    proc, _ = _check("--pr", "9", "--head-sha", HEAD, env={"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN})
    assert proc.returncode == 2 and "#9 was not found in acme/engine" in proc.stderr


def test_api_failure_is_no_verdict_exit_3(fake: FakeGitHub) -> None:
    fake.add_pull(7, HEAD)
    fake.inject(500, count=10)
    proc, _ = _check("--pr", "7", "--head-sha", HEAD, env={"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN})
    assert proc.returncode == 3 and "HTTP 500" in proc.stderr


def test_bad_token_is_refused_not_trusted(fake: FakeGitHub) -> None:
    fake.add_pull(7, HEAD)
    proc, _ = _check("--pr", "7", "--head-sha", HEAD, env={"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": "nope" * 10})
    assert proc.returncode == 3 and "HTTP 401" in proc.stderr


def _pr_event(tmp: Path, head_repo: str | None) -> dict[str, str]:
    event = {"pull_request": {"number": 5, "head": {"sha": HEAD, "repo": {"full_name": head_repo} if head_repo else None},
                              "base": {"repo": {"full_name": "acme/engine"}}}}
    path = tmp / "event.json"
    path.write_text(json.dumps(event))
    return {"GITHUB_EVENT_PATH": str(path), "GITHUB_SHA": OTHER}


@pytest.mark.parametrize(("head_repo", "fork"), [("acme/engine", "false"), ("mallory/engine", "true"), (None, "true")])
def test_pull_request_event_is_authoritative_and_forks_are_flagged(
    tmp_path: Path, head_repo: str | None, fork: str
) -> None:
    proc, out = _check(event="pull_request", env=_pr_event(tmp_path, head_repo), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out["pr"] == "5" and out["head-sha"] == HEAD and out["fork"] == fork
    assert out["runners"] == "gfx1151,sm86" and out["widths"] == ""


def test_pull_request_event_contradicted_by_inputs_is_refused(tmp_path: Path) -> None:
    proc, _ = _check("--pr", "6", event="pull_request", env=_pr_event(tmp_path, "acme/engine"))
    assert proc.returncode == 2 and "event is for #5" in proc.stderr
    proc, _ = _check("--head-sha", OTHER, event="pull_request", env=_pr_event(tmp_path, "acme/engine"))
    assert proc.returncode == 2 and "event's head is" in proc.stderr


def test_push_gates_github_sha_without_a_pr(tmp_path: Path) -> None:
    proc, out = _check(event="push", env={"GITHUB_SHA": OTHER}, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out["pr"] == "" and out["head-sha"] == OTHER


def test_runner_table_replaces_the_built_in_runners(tmp_path: Path) -> None:
    table = json.dumps([{"name": "mi300", "labels": ["self-hosted", "mi300"], "queue": "box2-gpu0"}])
    proc, out = _check("--runner-table", table, event="push", env={"GITHUB_SHA": OTHER}, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out["matrix"])["include"] == [{"runner": "mi300", "labels": ["self-hosted", "mi300"],
                                                     "queue": "box2-gpu0", "role": "gate"}]


def test_the_matrix_is_the_config_s_runner_table_and_a_runner_added_there_joins_it(tmp_path: Path) -> None:
    """Defect: `dispatch-check --runners local` said "unknown runner(s) local" (a hard-coded gfx1151/sm86 matrix)."""
    config = tmp_path / "ds4ci.toml"
    config.write_text('[runners.local]\ntarget_device = "cuda:0"\n')
    proc, out = _check("--runners", "local", event="push", env={"GITHUB_SHA": OTHER}, tmp=tmp_path, table=None)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out["matrix"]) == {"include": [{"runner": "local", "labels": ["self-hosted", "local"],
                                                      "queue": "local", "role": "gate"}]}
    config.write_text(config.read_text() + '[runners.mi300]\nlabels = ["self-hosted", "rocm", "mi300"]\n'
                      'role = "negative-control"\n')
    (tmp_path / "out.txt").unlink()
    proc, out = _check("--config", str(config), event="push", env={"GITHUB_SHA": OTHER}, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out["runners"] == "local,mi300"
    assert json.loads(out["matrix"])["include"][1] == {"runner": "mi300", "labels": ["self-hosted", "rocm", "mi300"],
                                                       "queue": "mi300", "role": "negative-control"}
    # The same table `ds4ci config runners --json` prints, which --runner-table takes back.
    printed = subprocess.run([DS4CI, "config", "runners", "--config", str(config), "--json"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    (tmp_path / "out.txt").unlink()
    again, out2 = _check("--runner-table", printed.strip(), event="push", env={"GITHUB_SHA": OTHER}, tmp=tmp_path)
    assert again.returncode == 0 and out2["matrix"] == out["matrix"], again.stderr
    bad, _ = _check("--config", str(config), "--runners", "gfx1151", event="push", env={"GITHUB_SHA": OTHER})
    assert bad.returncode == 2 and "unknown runner(s) gfx1151; expected 'all' or some of local, mi300" in bad.stderr


@pytest.mark.parametrize(("text", "said"), [
    ('[gate]\nwidths = [2]\n', "names no runner; expected a [runners.<name>] table"),
    ('[runners.a]\nlabels = "self-hosted"\n', "[runners.a].labels: expected a non-empty list of runner labels"),
    ('[runners.a]\nlabels = ["self-hosted", "x y"]\n', "expected a non-empty list of runner labels"),
    ('[runners.a]\nlabel = ["self-hosted"]\n', "[runners.a]: unknown key(s) label"),
    ('[runners.a]\nrole = "spare"\n', "role: expected one of gate, negative-control"),
])
def test_a_config_without_a_usable_runner_table_is_refused(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "ds4ci.toml").write_text(text)
    for cmd in (["config", "runners", "--json"], ["dispatch-check", "--event-name", "push", "--head-sha", HEAD]):
        proc = subprocess.run([DS4CI, *cmd], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              env={k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")})
        assert proc.returncode == 2 and said in proc.stderr and proc.stdout == "", (cmd, proc.stdout, proc.stderr)


def test_config_and_runner_table_together_are_refused() -> None:
    proc, _ = _check("--config", "x.toml", "--runner-table", TABLE, event="push", env={"GITHUB_SHA": OTHER})
    assert proc.returncode == 2 and "--config and --runner-table both give the runner table" in proc.stderr


def test_closed_pr_is_refused() -> None:
    run = dispatch.RunPlan(7, HEAD, None, (RunnerSpec("sm86", ("self-hosted",), "sm86"),), fork=False, verify_head=True)
    with pytest.raises(dispatch.HeadMismatchError, match="closed, not open"):
        dispatch.check_pinned_head(run, dispatch.PullHead(7, "closed", HEAD))


def test_outputs_never_span_lines(tmp_path: Path) -> None:
    with pytest.raises(dispatch.Ds4ciError, match="span lines"):
        dispatch.write_outputs(tmp_path / "o", {"x": "a\nb=c"})
