"""Contract test: every request ds4ci sends is valid against GitHub's official OpenAPI description.

GitHub's description (npm @octokit/openapi) is trimmed to the operations ds4ci calls and
served by Prism (npm @stoplight/prism-cli) with ``--errors``, so any request that breaks the
contract (wrong state enum, missing field, bad path) becomes an HTTP error and fails the test.
Prism is stateless (it answers with the description's examples), so behaviour is tested
against tests/fakegithub.py; this file only checks the shape of each request.
Install: ``npm ci --prefix .ci/node`` (.ci/run does this).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from paths import ROOT, TESTS

from ds4ci.commands.publish import PublishRequest, publish_documents
from ds4ci.evidence import results
from ds4ci.github import checkruns, mergefacts, statuses
from ds4ci.github.client import Client, connect
from ds4ci.github.verified import Published


def request_violations(log: Path) -> list[str]:
    """Prism logs every request that breaks the description (response problems are GitHub's own).

    Without --errors Prism still answers an invalid request with 422 and logs it; --errors is
    not used because it also turns GitHub's own examples that break its schema into 500s.
    """
    lines = log.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if "Request did not pass the validation rules" in line]

NODE = ROOT / ".ci" / "node"
PRISM = NODE / "node_modules" / ".bin" / "prism"
SPEC = NODE / "node_modules" / "@octokit" / "openapi" / "generated" / "api.github.com.json"
DATA = TESTS / "data" / "results"

# The operations ds4ci calls (ds4ci/github/client.py); keep in step with it.
OPERATIONS = {
    "/user": {"get"},
    "/repos/{owner}/{repo}/pulls/{pull_number}": {"get"},
    "/repos/{owner}/{repo}/pulls/{pull_number}/commits": {"get"},
    "/repos/{owner}/{repo}/issues/{issue_number}/comments": {"get", "post"},
    "/repos/{owner}/{repo}/issues/comments/{comment_id}": {"patch", "delete"},
    "/repos/{owner}/{repo}/statuses/{sha}": {"post"},
    "/repos/{owner}/{repo}/commits/{ref}/statuses": {"get"},
    "/repos/{owner}/{repo}/check-runs": {"post"},
    "/repos/{owner}/{repo}/check-runs/{check_run_id}": {"patch"},
    "/repos/{owner}/{repo}/commits/{ref}/check-runs": {"get"},
}

pytestmark = [
    pytest.mark.contract,
    pytest.mark.skipif(
        not (PRISM.exists() and SPEC.exists()),
        reason="Prism and @octokit/openapi are not installed: run `npm ci --prefix .ci/node`",
    ),
]


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/") and ref not in found:
            found.add(ref)
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def _drop_link_headers(node: Any) -> None:
    if isinstance(node, dict):
        headers = node.get("headers")
        if isinstance(headers, dict):
            for key in [k for k in headers if k.lower() == "link"]:
                del headers[key]
        for value in node.values():
            _drop_link_headers(value)
    elif isinstance(node, list):
        for value in node:
            _drop_link_headers(value)


def trim_spec(base_url: str) -> dict[str, Any]:
    full = json.loads(SPEC.read_text(encoding="utf-8"))
    paths = {}
    for path, methods in OPERATIONS.items():
        item = full["paths"][path]
        paths[path] = {k: v for k, v in item.items() if k in methods or k == "parameters"}
    spec = {k: v for k, v in full.items() if k not in ("paths", "components", "webhooks", "x-webhooks")}
    spec["paths"] = paths
    spec["servers"] = [{"url": base_url}]
    # Pull in every component referenced, transitively.
    found: set[str] = set()
    _refs(paths, found)
    components: dict[str, dict[str, Any]] = {}
    pending = list(found)
    while pending:
        ref = pending.pop()
        _, _, kind, name = ref.split("/", 3)
        target = full["components"][kind][name]
        components.setdefault(kind, {})[name] = target
        more: set[str] = set()
        _refs(target, more)
        for r in more - found:
            found.add(r)
            pending.append(r)
    spec["components"] = components
    _drop_link_headers(spec)
    text = json.dumps(spec).replace("https://api.github.com", base_url)
    trimmed: dict[str, Any] = json.loads(text)
    return trimmed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def prism(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any], Path]]:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    spec = trim_spec(base)
    path = tmp_path_factory.mktemp("prism") / "github.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    log = path.with_suffix(".log").open("w")
    proc = subprocess.Popen(
        [str(PRISM), "mock", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{base}/user", headers={"Accept": "application/json"}, timeout=2)
                break
            except requests.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Prism did not start: {path.with_suffix('.log').read_text()}") from None
                time.sleep(0.2)
        yield base, spec, path.with_suffix(".log")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _example_head(spec: dict[str, Any]) -> str:
    op = spec["paths"]["/repos/{owner}/{repo}/pulls/{pull_number}"]["get"]
    content = op["responses"]["200"]["content"]["application/json"]
    example = content.get("examples", {}).get("default", {}).get("value") or content.get("example")
    if example is None:
        ref = content["examples"]["default"]["$ref"].split("/")[-1]
        example = spec["components"]["examples"][ref]["value"]
    return str(example["head"]["sha"])


@pytest.fixture
def client(prism: tuple[str, dict[str, Any], Path], monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setenv("DS4CI_GITHUB_THROTTLE", "0")
    return Client(connect("ghp_contract_test_token_0123456789abcdef", prism[0]), "octocat/hello-world")


def test_every_call_matches_the_contract(client: Client, prism: tuple[str, dict[str, Any], Path]) -> None:
    head = _example_head(prism[1])
    assert client.identity()
    assert client.pr_head(1347) == head
    assert client.pr_commits(1347)
    assert all(s.creator for s in statuses.parse(client.commit_statuses(head), head))  # creator.login, documented
    assert isinstance(client.list_comments(1347), list)
    created = client.create_comment(1347, "<!-- ds4ci:sticky-comment -->\nbody")
    client.edit_comment(created.id, "<!-- ds4ci:sticky-comment -->\nbody 2")
    client.delete_comment(created.id)
    for state in ("pending", "success", "failure", "error"):
        client.create_status(head, state, "ds4ci/gfx1151", "x" * 140, "https://github.com/o/r/actions/runs/1")
    note = checkruns.Annotation("server/broken.c", 1, "error: undeclared", "build: error").to_json()
    for conclusion in ("success", "failure", "neutral", "action_required", "cancelled", "timed_out"):
        output = {"title": "t" * 140, "summary": "s" * 65535, "text": "x" * 65535, "annotations": [note] * 50}
        run_id, _ = client.create_check_run("ds4ci/gfx1151", head, conclusion, "https://github.com/o/r/actions/runs/1",
                                            output)
        client.update_check_run(run_id, "ds4ci/gfx1151", conclusion, None, {"title": "t", "summary": "s", "text": ""})
    assert mergefacts.check_runs(client.check_runs(head), head)  # id, name, app.slug, output.title: documented
    assert request_violations(prism[2]) == []


def test_prism_catches_a_bad_request(prism: tuple[str, dict[str, Any], Path]) -> None:
    # Proves the check has teeth: an invalid state is answered 422 and logged as a violation.
    before = len(request_violations(prism[2]))
    answer = requests.post(f"{prism[0]}/repos/o/r/statuses/{'a' * 40}", json={"state": "ok"},
                           headers={"Accept": "application/json"}, timeout=10)
    assert answer.status_code == 422
    assert len(request_violations(prism[2])) == before + 1
    # A check run's conclusion has no "error" (a status state): the contract refuses it too.
    answer = requests.post(f"{prism[0]}/repos/o/r/check-runs", json={
        "name": "ds4ci/x", "head_sha": "a" * 40, "status": "completed", "conclusion": "error"},
        headers={"Accept": "application/json"}, timeout=10)
    assert answer.status_code == 422
    assert len(request_violations(prism[2])) == before + 2


def test_publish_statuses_match_the_contract(
    prism: tuple[str, dict[str, Any], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Statuses and comments as publish sends them (documents past the trust step: they have no bundle)."""
    base, spec, log = prism
    before = request_violations(log)
    head = _example_head(spec)
    docs = []
    for name in ("pass", "fail", "negative-control"):
        doc = json.loads((DATA / f"{name}.json").read_text())
        doc["revisions"]["head"]["sha"] = head
        docs.append(Published(results.validate(doc), may_set_status=True))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_contract_test_token_0123456789abcdef")
    monkeypatch.setenv("DS4CI_GITHUB_THROTTLE", "0")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    for extra in ({"pr": 1347, "no_comment": True}, {"sha": head}):
        for group in ([docs[0], docs[2]], [docs[1]]):
            args: dict[str, Any] = {"repo": "octocat/hello-world", "api_url": base,
                                    "target_url": "https://github.com/o/r/actions/runs/1", "pr": None, "sha": None}
            args.update(extra)
            assert publish_documents(group, PublishRequest(**args)) == 0
    env = dict(os.environ, GITHUB_TOKEN="ghp_contract_test_token_0123456789abcdef", DS4CI_GITHUB_THROTTLE="0")
    env.pop("GITHUB_STEP_SUMMARY", None)
    proc = subprocess.run(
        [sys.executable, "-c", "from ds4ci.cli import main; main()", "publish", "--pending", "--runner", "gfx1151",
         "--sha", head, "--repo", "octocat/hello-world", "--api-url", base],
        capture_output=True, text=True, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # The check runs publish makes from the same documents, as a GitHub App's token (Actions: github-actions[bot]).
    from ds4ci.github import apply, facts, plan, runnerview

    views = runnerview.views_of(runnerview.viewed(docs), head, {}, allow_focused=False)
    made = plan.make(views, facts.Settings(repo="octocat/hello-world", target_url="https://github.com/o/r/actions/runs/1",
                                          status=False, comment_mode="off"),
                     facts.Facts(publisher="github-actions[bot]", app="github-actions"))
    client = Client(connect("ghp_contract_test_token_0123456789abcdef", base), "octocat/hello-world")
    apply.apply(made, client)
    assert request_violations(log) == before
