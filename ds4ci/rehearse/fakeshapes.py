"""The fake GitHub's JSON, shaped as GitHub's OpenAPI description (@octokit/openapi) has it, and GitHub's
validation of a check run's body (the 422s)."""

from __future__ import annotations

import re
from typing import Any

from ds4ci.rehearse.fakestate import FakeState

STATES = {"error", "failure", "pending", "success"}
CONCLUSIONS = {"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}
CHECK_STATUSES = {"queued", "in_progress", "completed", "waiting", "requested", "pending"}
APP_IDS = {"github-actions": 15368}  # app.id of the apps the fake knows; others get one from their slug


def app_id(slug: str) -> int:
    return APP_IDS.get(slug, 100000 + sum(map(ord, slug)))


def run_conclusion(jobs: dict[str, str]) -> str:
    return "success" if all(c in ("success", "skipped") for c in jobs.values()) else "failure"


def jobs_json(fake: FakeState, run: dict[str, Any], attempt: int) -> list[dict[str, Any]]:
    """The jobs of one attempt, as ``GET /actions/runs/{id}/attempts/{n}/jobs`` lists them."""
    base = f"{fake.url}{fake.api}"
    out = []
    for i, (name, conclusion) in enumerate(run["attempts"][attempt - 1].items()):
        job_id = run["id"] * 1000 + attempt * 100 + i
        done = conclusion not in ("queued", "in_progress")
        out.append({"id": job_id, "run_id": run["id"], "run_attempt": attempt, "name": name,
                    "status": "completed" if done else conclusion, "conclusion": conclusion if done else None,
                    "head_sha": run["head_sha"], "head_branch": run["head_branch"],
                    "workflow_name": "ds4ci gate", "check_run_url": f"{base}/check-runs/{job_id}",
                    "html_url": f"https://github.com/{fake.owner}/{fake.repo}/actions/runs/{run['id']}/job/{job_id}"})
    return out


def comment_json(fake: FakeState, c: dict[str, Any]) -> dict[str, Any]:
    base = f"{fake.url}{fake.api}"
    return {"id": c["id"], "node_id": f"IC_{c['id']}", "url": f"{base}/issues/comments/{c['id']}",
            "html_url": f"https://github.invalid/{fake.owner}/{fake.repo}/pull/{c['pr']}#issuecomment-{c['id']}",
            "issue_url": f"{base}/issues/{c['pr']}", "body": c["body"],
            "user": {"login": c["login"], "id": 1, "type": "Bot"},
            "created_at": c["created_at"], "updated_at": c["updated_at"], "author_association": "NONE"}


def status_json(fake: FakeState, s: dict[str, Any]) -> dict[str, Any]:
    return {"id": s["id"], "url": f"{fake.url}{fake.api}/statuses/{s['sha']}",
            "state": s["state"], "context": s["context"], "description": s["description"],
            "target_url": s["target_url"], "creator": {"login": s["creator"], "id": 1},
            "created_at": s["created_at"], "updated_at": s["created_at"]}


def review_json(fake: FakeState, n: int, r: dict[str, Any]) -> dict[str, Any]:
    base = f"{fake.url}{fake.api}"
    return {"id": r["id"], "node_id": f"PRR_{r['id']}", "user": {"login": r["login"], "id": 2, "type": "User"},
            "body": "", "state": r["state"], "html_url": f"https://github.invalid/{fake.owner}/{fake.repo}/pull/{n}",
            "pull_request_url": f"{base}/pulls/{n}", "_links": {}, "submitted_at": r["submitted_at"],
            "commit_id": r["commit_id"], "author_association": r["association"]}


def check_run_json(fake: FakeState, r: dict[str, Any]) -> dict[str, Any]:
    url = f"{fake.url}{fake.api}/check-runs/{r['id']}"
    out = r.get("output") or {}
    return {"id": r["id"], "name": r["name"], "head_sha": r["sha"], "status": r["status"],
            "conclusion": r["conclusion"], "node_id": f"CR_{r['id']}", "external_id": r.get("external_id", ""),
            "url": url, "html_url": f"https://github.invalid/{fake.owner}/{fake.repo}/runs/{r['id']}",
            "details_url": r.get("details_url"), "started_at": "2026-11-29T12:00:00Z",
            "completed_at": "2026-11-29T12:05:00Z" if r["status"] == "completed" else None,
            "output": {"title": out.get("title"), "summary": out.get("summary"), "text": out.get("text"),
                       "annotations_count": len(r.get("annotations", [])), "annotations_url": f"{url}/annotations"},
            "check_suite": {"id": 1}, "pull_requests": [],
            "app": {"id": app_id(r["app"]), "slug": r["app"], "name": r["app"], "node_id": f"A_{r['app']}",
                    "owner": None, "description": None, "external_url": "https://github.invalid",
                    "html_url": f"https://github.invalid/apps/{r['app']}", "created_at": "2026-01-01T00:00:00Z",
                    "updated_at": "2026-01-01T00:00:00Z", "permissions": {}, "events": []}}


def check_run_problem(payload: dict[str, Any], creating: bool) -> str | None:
    """What GitHub's validation (422) would refuse in a check run's create or update body, or None."""
    if creating and (not isinstance(payload.get("name"), str) or not payload["name"]):
        return "name is missing"
    if creating and not re.fullmatch(r"[0-9a-f]{40}", str(payload.get("head_sha", ""))):
        return "head_sha is not a commit"
    status = payload.get("status", "queued")
    conclusion = payload.get("conclusion")
    if status not in CHECK_STATUSES:
        return f"status {status!r} is not valid"
    if conclusion is not None and conclusion not in CONCLUSIONS:
        return f"conclusion {conclusion!r} is not valid"
    if status == "completed" and conclusion is None:
        return "conclusion is required when status is completed"
    output = payload.get("output")
    if output is None:
        return None
    if not isinstance(output, dict) or not isinstance(output.get("title"), str) or not isinstance(
            output.get("summary"), str):
        return "output needs a title and a summary"
    return _output_problem(output)


def _output_problem(output: dict[str, Any]) -> str | None:
    for key in ("summary", "text"):
        if len(output.get(key) or "") > 65535:
            return f"output.{key} is longer than 65535 characters"
    notes = output.get("annotations") or []
    if len(notes) > 50:
        return "only 50 annotations are allowed per request"
    for note in notes:
        if not (isinstance(note, dict) and isinstance(note.get("path"), str) and note["path"]
                and isinstance(note.get("start_line"), int) and isinstance(note.get("end_line"), int)
                and note.get("annotation_level") in ("notice", "warning", "failure")
                and isinstance(note.get("message"), str)):
            return f"annotation {note!r:.200} needs path, start_line, end_line, annotation_level and message"
    return None


def store_check_run(run: dict[str, Any], payload: dict[str, Any]) -> None:
    for key in ("status", "conclusion", "details_url", "external_id"):
        if key in payload:
            run[key] = payload[key]
    if run["status"] != "completed":
        run["conclusion"] = None
    if "output" in payload:
        output = payload["output"]
        run["output"] = {"title": output.get("title"), "summary": output.get("summary"), "text": output.get("text")}
        run.setdefault("annotations", []).extend(output.get("annotations") or [])  # GitHub appends them


def body_problem(payload: dict[str, Any]) -> bool:
    """A comment's body GitHub refuses (422): not a string, or longer than 65,536 characters."""
    return not isinstance(payload.get("body"), str) or len(payload["body"]) > 65536
