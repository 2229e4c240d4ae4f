"""Which of GitHub's own records vouch for a green ``ds4ci/<runner>`` (merge-check, the predecessor lookup).

A commit status says ``github-actions[bot]`` for every workflow, and a check run created through the API
with a job's ``GITHUB_TOKEN`` lands in whichever Actions check suite GitHub picks: neither names the
workflow that made it, and a status's ``target_url`` is text any writer can copy. So a green counts only
when a record a pull request cannot produce ties it to the trusted gate (``[merge] vouch``):

* ``"workflow"`` (default): the runs of the trusted gate that the publisher's ``ds4ci/<runner>`` statuses
  link are looked up through the API (the URL names the run; GitHub's record of it says what ran). A run
  is the trusted gate when it ran ``merge.workflow`` (its ``path``), was started by ``pull_request_target``
  or ``workflow_dispatch``, ran on the repository's default branch (``head_branch``: GitHub runs the default
  branch's gate.yml for every pull request, whatever its base), from a commit in that branch's history
  (compare ``DEFAULT...run.head_sha`` is identical or behind) and is titled with the head (``run-name`` in
  gate.yml). A pull request into another branch (a release branch) is so gated too: with the default
  branch's definition and settings. The newest such run decides: its job ``verdict <runner>`` (made by Actions
  inside that run, so its record is GitHub's; ``<job> / verdict <runner>`` where the trusted file calls
  ds4ci's gate workflow) must have concluded success in the run's latest attempt.
* ``"publisher"``: a check run ``ds4ci/<runner>`` created by the GitHub App ``merge.vouch_app_id``, whose
  private key lives with the gate service, out of every job's reach; the newest decides.

Each answer names the record that vouched, or why none did.
"""

from __future__ import annotations

from collections.abc import Sequence

from ds4ci.github import provenance, statuses
from ds4ci.github.checkruns import app_of
from ds4ci.github.client import Client
from ds4ci.github.merge import GATE_CONTEXT, CheckRun, Requirements, Vouch
from ds4ci.github.shapes import check_runs
from ds4ci.github.statuses import Status

VERDICT_JOB = "verdict {runner}"  # gate.yml's job that succeeds only when that runner's published verdict passed
REPORTER = ".github/workflows/report.yml"  # ds4ci's reporter for forks, started only by workflow_run
IN_HISTORY = ("identical", "behind")  # compare BASE...SHA: SHA is the branch's tip or one of its ancestors


def is_verdict_job(job: dict[str, object], name: str) -> bool:
    """The job ``name`` of the gate workflow: so named in a copy of it, ``<caller's job> / name`` where the
    trusted file calls ds4ci's own (GitHub names a called workflow's jobs after the calling job)."""
    found = job.get("name")
    return isinstance(found, str) and (found == name or found.endswith(f" / {name}"))


class Voucher:
    """Judges greens of one pull request, caching GitHub's answers across commits."""

    def __init__(self, client: Client, repo: str, need: Requirements) -> None:
        self._client = client
        self._repo = repo
        self._need = need
        self._default = ""  # the repository's default branch, read when a run is first judged
        self._runs: dict[int, provenance.RunRecord] = {}
        self._history: dict[str, str] = {}

    def judge(self, head: str, runner: str, found: Sequence[Status], runs: Sequence[CheckRun]) -> Vouch:
        """Does a record of GitHub's vouch for ``runner``'s green on ``head``? ``found``/``runs``: head's."""
        if self._need.vouch == "publisher":
            return self._by_app(head, runner, runs)
        context, app = GATE_CONTEXT.format(runner=runner), app_of(self._need.publisher)
        links = [(s.state, s.target_url) for s in found if s.context == context and s.creator == self._need.publisher]
        links += [(r.conclusion or r.status, r.details_url) for r in runs
                  if r.name == context and r.head_sha == head and r.app == app]
        return self._by_workflow(head, context, runner, links)

    def judge_commit(self, sha: str, runner: str) -> Vouch:
        """The same for a commit whose statuses and check runs are not read yet (a predecessor)."""
        found = statuses.parse(self._client.commit_statuses(sha), sha)
        return self.judge(sha, runner, found, check_runs(self._client.check_runs(sha), sha))

    # ----- vouch = "publisher" -------------------------------------------------------------------------------------

    def _by_app(self, head: str, runner: str, runs: Sequence[CheckRun]) -> Vouch:
        context, app_id = GATE_CONTEXT.format(runner=runner), self._need.vouch_app_id
        mine = [r for r in runs if r.name == context and r.head_sha == head and r.app_id == app_id]
        if not mine:
            return Vouch(False, f"no check run {context} of the GitHub App with id {app_id} on {head[:12]}")
        run = max(mine, key=lambda r: r.id)
        if run.status != "completed" or run.conclusion != "success":
            return Vouch(False, f"check run {run.id} of GitHub App {run.app} (id {app_id}) is "
                                f"{run.conclusion or run.status}", run.conclusion if run.status == "completed" else None)
        return Vouch(True, f"check run {run.id} of GitHub App {run.app} (id {app_id}) concluded success", "success")

    # ----- vouch = "workflow" --------------------------------------------------------------------------------------

    def _by_workflow(self, head: str, context: str, runner: str, links: Sequence[tuple[str, str | None]]) -> Vouch:
        """``links``: (state, URL) of the publisher's statuses and its app's check runs named ``context``."""
        reasons: list[str] = []
        trusted: dict[int, provenance.RunRecord] = {}
        for state, url in links:
            run_id = provenance.run_id(url, self._repo)
            why = (f"its link {(url or '')[:120]!r} names no workflow run of {self._repo}"
                   if run_id is None else self._untrusted(run_id, head))
            if why is None and run_id is not None:
                trusted[run_id] = self._runs[run_id]
            elif why is not None and state == "success" and why not in reasons:
                reasons.append(why)
        if not trusted:
            return Vouch(False, "; ".join(reasons) or f"no status or check run {context} links a run of the trusted gate")
        newest = max(trusted.values(), key=lambda r: (r.started, r.id))
        return self._verdict(newest, runner)

    def _record(self, run_id: int) -> provenance.RunRecord:
        if run_id not in self._runs:
            self._runs[run_id] = provenance.parse_run(self._client.workflow_run(run_id), run_id)
        return self._runs[run_id]

    def run_problem(self, run_id: int) -> str | None:
        """Why run ``run_id`` is no run of the trusted gate on the default branch, of whichever commit, nor of the
        reporter (None: it is one of them). A ``workflow_run`` run is always of the default branch's file: GitHub
        starts one only from there, so a pull request cannot make one of its own copy of report.yml."""
        run = self._record(run_id)
        if (run.path.partition("@")[0], run.event, run.repo.lower()) == (REPORTER, "workflow_run", self._repo.lower()):
            return None
        return self._untrusted(run_id, None)

    def _untrusted(self, run_id: int, head: str | None) -> str | None:
        """Why run ``run_id`` is no run of the trusted gate for ``head`` (any head: None) on the default branch (None: it is)."""
        run = self._record(run_id)
        if not self._default:
            self._default = self._client.default_branch()
        why = provenance.problem(run, repo=self._repo, workflow=self._need.workflow, default_branch=self._default,
                                 head=head)
        if why is not None:
            return why
        if run.event == "merge_group":  # it gated a merge queue's commit, never the pull request's head
            gated = f"the head {head[:12]}" if head else "a pull request's head"
            return f"run {run.id} gated a merge queue's commit, not {gated}"
        if run.head_sha not in self._history:
            self._history[run.head_sha] = (self._client.compare_status(self._default, run.head_sha)
                                           if run.head_sha else "unknown")
        status = self._history[run.head_sha]
        if status not in IN_HISTORY:
            return (f"run {run.id} ran the commit {run.head_sha[:12] or '(none)'}, which is not in the history of "
                    f"the default branch {self._default} ({status})")
        return None

    def _verdict(self, run: provenance.RunRecord, runner: str) -> Vouch:
        """The newest trusted run's own job ``verdict <runner>``, in its latest attempt."""
        job_name = VERDICT_JOB.format(runner=runner)
        if run.attempt < 1:
            return Vouch(False, f"GitHub's record of run {run.id} names no attempt")
        jobs = [j for j in self._client.run_jobs(run.id, run.attempt) if isinstance(j, dict) and is_verdict_job(j, job_name)]
        where = f"(attempt {run.attempt})"
        if not jobs:
            return Vouch(False, f"run {run.id} has no job '{job_name}' in attempt {run.attempt}")
        if len(jobs) > 1:
            return Vouch(False, f"run {run.id} has {len(jobs)} jobs named '{job_name}' {where}: which one is unclear")
        status, conclusion = jobs[0].get("status"), jobs[0].get("conclusion")
        if status != "completed":
            return Vouch(False, f"run {run.id}'s job '{job_name}' has not finished ({status}) {where}")
        if conclusion != "success":
            return Vouch(False, f"run {run.id}'s job '{job_name}' concluded {conclusion} {where}",
                         conclusion if isinstance(conclusion, str) else None)
        return Vouch(True, f"run {run.id} ({run.path}, {run.event} on {run.head_branch}, job '{job_name}' success in "
                           f"attempt {run.attempt}; it gated the head, with the settings of {run.head_branch} at "
                           f"{run.head_sha[:12]})", "success", run=run.id)
