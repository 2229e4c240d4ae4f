"""The typed shape of ``results.json``: one ``TypedDict`` per object of the v1 JSON Schema.

The schema (``ds4ci/evidence/schema/result-v1.json``) is the authority on what a results file may
contain and is what untrusted files are validated against; these records let ``mypy --strict``
check every field the gate writes and every field verify, report and publish read.
``tests/unit/evidence/test_records.py`` walks both and fails on any field, optional key or type
present on one side only.

They live in the base stage because results are assembled from every stage below the gate: the
runner's fingerprint and revisions, the judging stage's cells, the gate's checks and build.
Where the schema is open (``additionalProperties``), the record is a ``dict[str, ...]``.
No ``from __future__ import annotations`` here: ``NotRequired`` must be seen when a class is made.
"""

import sys
from typing import Literal, TypedDict

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired

Verdict = Literal["pass", "fail", "error", "not_run"]
ExitCode = Literal[0, 1, 2, 3]
StepStatus = Literal["pass", "fail", "error"]
CheckParser = Literal["junit", "ctest", "build-progress", "compute-sanitizer", "exit-code"]
RunnerRole = Literal["gate", "negative-control"]
EnvPrefix = Literal["DFLASH_", "LUCE_"]
Scope = Literal["full", "focused"]
Arm = Literal["target-only", "reference-exact"]
Containment = Literal["sandbox", "pid-namespace", "subreaper+sweep"]
Signing = Literal["service", "job-key", "local"]  # whose key signed the attestation (ds4ci.gate.signer)
Oracle = Literal["server token trace", "exact-differential trace", "tiny-model words", "text parity"]
CountersSource = Literal["printed", "derived"]


class FileIdentity(TypedDict):
    """One input file: its role, where it was read, its size and SHA-256, the pin it was checked against."""

    role: str
    path: str
    size: int
    sha256: str
    pinned: str | None
    verified: bool


class MismatchRecord(TypedDict):
    """The first differing token position and a window of IDs around it from both arms."""

    position: int
    window_start: int
    target_ids: list[int]
    spec_ids: list[int]
    target_len: int
    spec_len: int


class PromptResult(TypedDict):
    """One width x prompt cell: parity, speculation counters and why it failed."""

    prompt_index: int
    prompt_sha256: str
    verdict: Verdict
    reasons: list[str]
    requests: int
    tokens_target: int | None
    tokens_spec: int | None
    parity_requests: int
    steps: int | None
    matched: int | None
    offered: int | None
    matched_min: int | None  # the range of matched counts the first request's evidence allows (both = matched
    matched_max: int | None  # when it fixes one; None: no counters)
    rejection_observed: bool  # every request's counters show matched_max < offered (a rejection at the safe bound)
    rejected_drafts: int | None  # offered - matched_max of the first request: the fewest rejections it proves
    full_snap_claimed: bool | None  # the server's summary says full_snap=1: its claim, not something the gate saw
    banner_claimed: bool  # the server printed the reference-exact banner: its claim
    repeats_identical: bool
    counters_identical: bool
    mismatch: MismatchRecord | None
    counters: NotRequired[CountersSource | None]


class BoundaryRecord(TypedDict):
    """Verify batches that touched one kind of boundary (judging.coverage)."""

    batches: int
    rejected: int
    rejected_at_boundary: int
    first_positions: list[int]
    first_rejected_positions: list[int]


class BoundariesRecord(TypedDict):
    ratio4: BoundaryRecord
    ratio128: BoundaryRecord
    window: BoundaryRecord


CoverageSource = Literal["token-trace", "compare", "timing", "summary"]


class CoverageRecord(TypedDict):
    """What one width's speculative requests exercised (judging.coverage), and the minimums unmet."""

    width: int
    requests: int
    source: CoverageSource
    sources: list[CoverageSource]
    steps: int | None
    accept_histogram: list[int] | None
    rejections_per_slot: list[int] | None
    matched: int | None
    offered: int | None
    boundaries: BoundariesRecord | None
    notes: list[str]
    unmet: list[str]


class WidthResult(TypedDict):
    """One reference-exact server (one width q) and its cells."""

    q: int
    verdict: Verdict
    reasons: list[str]
    prompts: list[PromptResult]
    server_log: str | None
    server_start_s: float | None
    oracle: NotRequired[Oracle | None]
    evidence: NotRequired[dict[str, int]]
    coverage: NotRequired[CoverageRecord]


class Revision(TypedDict):
    ref: str | None
    sha: str
    subject: NotRequired[str]


class CheckResult(TypedDict):
    """One extra check ([[checks]]): its command, parsed counts and log tail."""

    name: str
    parser: CheckParser
    command: str
    status: StepStatus
    passed: int | None
    failed: int | None
    skipped: int | None
    total: int | None
    duration_s: float
    exit_code: int | None
    summary: str
    log_tail: str


class RunnerInfo(TypedDict):
    name: str
    role: RunnerRole
    negative_control_for: NotRequired[str | None]


class ServerTiming(TypedDict):
    arm: Arm
    q: int | None
    ready_s: float | None
    run_s: float | None


class Timings(TypedDict):
    total_s: float
    hashing_s: float
    servers: list[ServerTiming]


class Identities(TypedDict):
    """Every input file's identity (null before hashing ran)."""

    server_bin: FileIdentity | None
    target: FileIdentity | None
    draft: FileIdentity | None
    prompts: list[FileIdentity]


class RecordedSettings(TypedDict):
    """The settings the run used, as sealed in attempt.json."""

    widths: list[int]
    max_tokens: int
    seed: int
    repeats: int
    target_device: str
    max_ctx: int
    chunk: int
    mmvq_max_ncols: int
    startup_timeout_s: float
    request_timeout_s: float
    stop_timeout_s: float
    server_args: NotRequired[list[str]]
    env_prefixes: NotRequired[list[EnvPrefix]]
    log_cap_mib: NotRequired[int]
    require_coverage: NotRequired[bool]
    text_parity: NotRequired[bool]
    request_body: NotRequired[dict[str, object]]
    configured_widths: NotRequired[list[int]]
    scope: NotRequired[Scope]
    allow_dirty_tree: NotRequired[bool]
    devices: NotRequired[list[str]]
    parallel: NotRequired[int]
    server: NotRequired[Literal["program", "simulator"]]


class PolicyRecord(TypedDict):
    """The policy part of each arm's environment."""

    common: dict[str, str]
    removed: list[str]
    arms: dict[str, dict[str, str]]
    difference: list[str]


class ServerInfo(TypedDict):
    name: str | None
    version: str | None


class TargetPrompt(TypedDict):
    prompt_index: int
    n: int | None
    ids_sha256: str | None


class TargetOnlyResult(TypedDict):
    """The target-only server: the oracle every width is compared against."""

    verdict: Verdict
    reasons: list[str]
    deterministic: bool
    prompts: list[TargetPrompt]
    server_log: str | None
    oracle: NotRequired[Oracle | None]
    evidence: NotRequired[dict[str, int]]


class EvidenceRecord(TypedDict):
    dir: str
    manifest_sha256: str | None
    diagnostics: str | None


class GpuRecord(TypedDict):
    vendor: Literal["nvidia", "amd", "unknown"]
    name: str
    arch: NotRequired[str | None]
    memory_mib: NotRequired[int | None]
    driver: NotRequired[str | None]


class HealthRecord(TypedDict):
    status: Literal["ok", "unhealthy", "timeout", "unknown"]
    detail: str


ProbeStatus = Literal["ok", "missing", "timeout", "failed"]


class FingerprintRecord(TypedDict):
    """Hardware, driver and toolchain of the runner (``ds4ci preflight``)."""

    gpus: list[GpuRecord]
    health: HealthRecord
    toolchain: dict[str, str | None]
    host: dict[str, str | None]
    probes: dict[str, ProbeStatus]


class SyntheticMerge(TypedDict):
    status: Literal["clean", "conflict", "not_computed"]
    tree: str | None
    conflicts: list[str]


class RevisionsRecord(TypedDict):
    """Exactly which commits the evidence is for (``ds4ci revisions``)."""

    head: Revision
    base: Revision | None
    upstream: Revision | None
    merge_base: str | None
    synthetic_merge: SyntheticMerge
    last_validated_predecessor: str | None
    dirty: NotRequired[bool | None]


class InheritedVariable(TypedDict):
    name: str
    value: str
    passed: bool


class Provenance(TypedDict):
    inherited: list[InheritedVariable]


class BuildRecord(TypedDict):
    """The [build] step: the server under test built from the PR."""

    command: str
    cwd: str
    server_bin: str
    status: StepStatus
    exit_code: int | None
    duration_s: float
    targets_built: int | None
    targets_total: int | None
    summary: str
    log_tail: str


class ArmPlacement(TypedDict):
    """Where and when one arm's server ran (its lifecycle.json), for a sequential and a parallel run alike."""

    key: str
    q: int | None
    device: str
    started_at: str
    finished_at: str


class CalibrationCitation(TypedDict):  # the calibration a gate cites (ds4ci.evidence.citation), from citation.json
    state: Literal["cited", "failed", "never", "refused"]
    line: str
    record_sha256: str | None
    finished: str | None
    engine_commit: str | None
    caught: int | None
    acting: int | None


class Results(TypedDict):
    """One runner's ``results.json``."""

    schema: Literal["ds4ci/result/v1"]
    schema_version: Literal[3]  # ds4ci.evidence.convert.CURRENT; older documents are converted on reading
    ds4ci_version: str
    runner: RunnerInfo
    verdict: Verdict
    reasons: list[str]
    exit_code: ExitCode
    started_at: str
    finished_at: str
    timings: Timings
    identities: Identities
    settings: RecordedSettings
    policy: PolicyRecord
    server: ServerInfo
    target_only: TargetOnlyResult
    widths: list[WidthResult]
    evidence: EvidenceRecord
    fingerprint: FingerprintRecord | None
    revisions: RevisionsRecord | None
    checks: list[CheckResult]
    reproduce: str
    provenance: NotRequired[Provenance]
    warnings: NotRequired[list[str]]
    errors: NotRequired[list[str]]
    containment: NotRequired[Containment | None]
    signing: NotRequired[Signing | None]
    build: NotRequired[BuildRecord | None]
    arms: NotRequired[list[ArmPlacement]]
    calibration: NotRequired[CalibrationCitation]


class BisectDifference(TypedDict):
    """One failing width x prompt cell of the first failing commit: where its answers first differ."""

    q: int
    prompt_index: int
    position: int | None  # None: the cell failed without differing answers (e.g. no rejection seen)
    reason: str


class BisectCommit(TypedDict):
    sha: str
    subject: str


class BisectStep(TypedDict):
    """One gate run of a bisect: the commit, what it meant for the search, and its evidence bundle."""

    position: int
    sha: str
    subject: str
    outcome: Literal["pass", "fail", "skip", "stop"]
    exit_code: int | None
    reason: str
    duration_s: float
    evidence: str | None
    differences: list[BisectDifference]


class BisectResult(TypedDict):
    """``ds4ci bisect --json``: the first failing commit of a range, or why none was named."""

    schema: Literal["ds4ci/bisect/v1"]
    runner: str  # the runner table every step's gate ran with
    verdict: Literal["found", "not_found", "no_verdict"]
    exit_code: int
    reason: str
    good: BisectCommit
    bad: BisectCommit
    commits: int  # in the range, the good end included
    expected_steps: int
    first_failing: BisectCommit | None
    last_passing: BisectCommit | None
    differences: list[BisectDifference]  # the first failing commit's failing cells
    skipped: list[BisectStep]
    candidates: list[BisectCommit]  # with only skipped commits left: where the culprit may be
    steps: list[BisectStep]
