"""From an attempt's raw evidence to its verdicts: the one judging path of the gate and of verify.

The gate runs the servers and writes raw evidence only (each server's complete stdout and stderr,
the exact request bodies, the responses, and ``lifecycle.json`` with what happened to the
process). Once every server has stopped, these functions read that evidence back and judge it.
``ds4ci verify`` calls the same functions on a sealed bundle, so the two cannot drift.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.judging import confined, coverage, coverpolicy, crash, exacttrace, modeless, strictjson
from ds4ci.judging.answer import read_answer
from ds4ci.judging.attribution import ServerLog, attribute
from ds4ci.judging.counters import request_steps
from ds4ci.judging.oracle import ORACLE_EXACT, ORACLE_TEXT, ORACLE_TRACE, ORACLE_WORDS, TOKEN_ORACLES, Observed
from ds4ci.judging.profile import arm_profile
from ds4ci.judging.protocol import BANNER_FAMILY, scan_log
from ds4ci.judging.steps import build_reason
from ds4ci.judging.tinywords import known_target
from ds4ci.judging.verdict import (
    ERROR,
    FAIL,
    PASS,
    TargetReference,
    ids_digest,
    judge_target_only,
    judge_width_prompt,
    worst,
)
from ds4ci.records import BuildRecord, CheckResult, Oracle, TargetOnlyResult, Verdict, WidthResult

SERVERS = "servers"
REQUESTS = "requests"
LIFECYCLE = "lifecycle.json"
TARGET_KEY = "target-only"
STREAMS = ("stderr", "stdout")
# Every request must state every sampler field: an omitted one falls back to the model card's
# default, and a penalty there sends the speculative arm to plain decoding (docs/protocol.md).
SAMPLER_FIELDS: Mapping[str, float | int | bool] = {
    "temperature": 0, "top_p": 1, "top_k": 0, "frequency_penalty": 0, "presence_penalty": 0,
    "repetition_penalty": 1, "stream": False,
}
# Trusted records kept per server: one trace and one summary per request, plus slack for banners
# and failure lines, plus the per-step lines (at most 8 compare lines, 4 + 1 per 32 steps of timing
# lines) and one per-token line per generated token; more than this is a flood and fails the run.
RECORDS_PER_REQUEST = 4
STEP_RECORDS_PER_REQUEST = 16
RECORDS_SLACK = 64


def server_key(q: int | None) -> str:
    return TARGET_KEY if q is None else f"q{q}"


def server_label(q: int | None) -> str:
    return TARGET_KEY if q is None else f"reference-exact q={q}"


def request_body(prompt: str, seed: int, max_tokens: int) -> dict[str, Any]:
    """The exact body of every completion request: greedy, every sampler field stated."""
    return {
        "messages": [{"role": "user", "content": prompt}],
        **SAMPLER_FIELDS,
        "seed": seed,
        "max_tokens": max_tokens,
    }


@dataclass(frozen=True)
class Settings:
    """What judging needs of the recorded settings."""

    widths: tuple[int, ...]
    repeats: int
    seed: int
    max_tokens: int
    prompt_sha256s: tuple[str, ...]
    target_sha256: str | None = None  # the target's SHA-256 as ds4ci hashed it (identities.json)
    require_coverage: bool = False  # [gate] require_coverage: an unmet coverage minimum fails a passing width
    text_parity: bool = False  # [gate] text_parity: with no token-ID oracle, judge parity on the answers' text


class EvidenceError(Exception):
    """Evidence that cannot be read as the gate writes it (missing, malformed): never a verdict."""


def read_json(attempt: Path, rel: object) -> Any:
    """A JSON file of the attempt, ``rel`` read through ``confined`` (inside it, regular, size-limited)."""
    try:
        data = confined.read_bytes(attempt, rel)
        return strictjson.loads(data, str(rel)[:200])
    except confined.ConfinedError as exc:
        raise EvidenceError(str(exc)) from exc
    except strictjson.StrictJsonError as exc:
        raise EvidenceError(f"cannot be read as JSON: {str(exc)[:400]}") from exc


def _is_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict) and isinstance(entry.get("prompt_index"), int) and isinstance(entry.get("repeat"), int)
        and isinstance(entry.get("request"), str)
    )


# The lifecycle fields judging reads besides requests, with the JSON types they may have.
_LIFECYCLE_FIELDS: Mapping[str, tuple[type, ...]] = {
    "stop": (dict,), "log_flood": (dict,), "overrides_after": (list,), "swept": (list,),
    "error": (str, type(None)), "q": (int, type(None)), "exact_trace": (str, type(None)),
}
_JSON_NAMES: Mapping[type, str] = {dict: "an object", list: "an array", str: "a string", int: "an integer"}


def load_lifecycle(attempt: Path, key: str) -> dict[str, Any]:
    """A server's lifecycle record, with the shape judging relies on checked (fail closed)."""
    where = f"{SERVERS}/{key}/{LIFECYCLE}"
    doc = read_json(attempt, where)
    if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
        raise EvidenceError(f"{where} is not a lifecycle record (no requests list)")
    if not all(_is_entry(e) for e in doc["requests"]):
        raise EvidenceError(f"{where}: every request needs an integer prompt_index and repeat and a request path")
    for field, kinds in _LIFECYCLE_FIELDS.items():
        if field in doc and (isinstance(doc[field], bool) or not isinstance(doc[field], kinds)):
            want = " or ".join("null" if k is type(None) else _JSON_NAMES[k] for k in kinds)
            raise EvidenceError(f"{where}: {field} must be {want}, found {type(doc[field]).__name__}")
    return doc


def exchange_paths(key: str, prompt_index: int, repeat: int) -> tuple[str, str]:
    """Where one request's body and answer are sealed, relative to the attempt."""
    stem = f"{REQUESTS}/{key}/p{prompt_index}-r{repeat + 1}"
    return f"{stem}.request.json", f"{stem}.response.json"


def check_order(key: str, entries: Sequence[Mapping[str, Any]], settings: Settings) -> None:
    """A server that lived to the end was sent every prompt ``repeats`` times, interleaved, at the gate's paths."""
    prompts, where = len(settings.prompt_sha256s), f"{SERVERS}/{key}/{LIFECYCLE}"
    if len(entries) != prompts * settings.repeats:
        raise EvidenceError(
            f"{where} records {len(entries)} request(s); {prompts} prompt(s) x {settings.repeats} repeat(s) "
            f"= {prompts * settings.repeats} were due"
        )
    for index, entry in enumerate(entries):
        prompt, repeat = index % prompts, index // prompts
        request, response = exchange_paths(key, prompt, repeat)
        due = {"index": index, "prompt_index": prompt, "repeat": repeat, "request": request, "response": response}
        found = {k: entry.get(k) for k in due}
        if found != due:
            raise EvidenceError(f"{where}: request {index} is recorded as {found}, expected {due} (interleaved order)")


def _check_body(attempt: Path, entry: Mapping[str, Any], settings: Settings, where: str) -> list[str]:
    """The recorded request body must be exactly the one the settings prescribe."""
    body = read_json(attempt, entry["request"])
    index = entry["prompt_index"]
    if not 0 <= index < len(settings.prompt_sha256s):
        return [f"{where}: recorded prompt index {index!r} is not one of the {len(settings.prompt_sha256s)} prompts"]
    try:
        prompt = body["messages"][0]["content"]
    except (KeyError, IndexError, TypeError):
        return [f"{where}: recorded request body has no user message"]
    if not isinstance(prompt, str) or hashlib.sha256(prompt.encode("utf-8")).hexdigest() != settings.prompt_sha256s[index]:
        return [f"{where}: the prompt sent is not the pinned prompt {index}"]
    if body != request_body(prompt, settings.seed, settings.max_tokens):
        return [f"{where}: the request sent does not state exactly the greedy sampler fields, seed and max_tokens"]
    return []


def observe(
    attempt: Path, key: str, life: Mapping[str, Any], speculative: bool, settings: Settings,
    oracle: Oracle | None = ORACLE_TRACE,
) -> tuple[list[Observed], ServerLog, list[str], dict[str, int]]:
    """One stopped server's requests with their attributed records, request-body problems, and its evidence profile."""
    entries = life["requests"]
    check_order(key, entries, settings)
    answered = [e for e in entries if e.get("answered") is True]
    per_request = RECORDS_PER_REQUEST + STEP_RECORDS_PER_REQUEST + max(settings.max_tokens, 0)
    limit = per_request * len(entries) + RECORDS_SLACK
    scans = []
    for stream in STREAMS:
        try:
            scans.append(scan_log(attempt / SERVERS / key / f"{stream}.log", stream, limit, root=attempt))
        except confined.ConfinedError as exc:
            raise EvidenceError(str(exc)) from exc
    log = attribute(scans, len(entries), speculative, traces=oracle == ORACLE_TRACE)
    problems: list[str] = []
    traced: tuple[exacttrace.TracedRequest, ...] = ()
    if oracle == ORACLE_EXACT:
        traced, problem = exacttrace.for_server(attempt, exact_trace_path(key), len(entries), life.get("exact_trace"))
        problems += [problem] if problem else []
    observed = []
    for index, (entry, request_log) in enumerate(zip(entries, log.requests, strict=True)):
        where = f"{key} request {entry.get('index')}"
        problems += _check_body(attempt, entry, settings, where)
        answer = read_answer(read_json(attempt, entry["response"])) if entry.get("answered") is True else None
        exact = traced[index] if index < len(traced) else None
        observed.append(Observed(entry["prompt_index"], entry["repeat"], request_log, not log.problems, answer, exact))
    if len(answered) != len(entries):
        problems.append(f"{len(entries) - len(answered)} of {len(entries)} request(s) were not answered")
    return observed, log, problems, arm_profile(scans, [o.answer for o in observed])


def exact_trace_path(key: str) -> str:
    """Where a server's exact-differential trace is sealed, relative to the attempt."""
    return f"{SERVERS}/{key}/{exacttrace.EVIDENCE_NAME}"


def lifecycle_issues(key: str, life: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) from how the server lived and stopped; an error means no verdict."""
    label = server_label(life.get("q") if key != TARGET_KEY else None)
    errors: list[str] = []
    warnings: list[str] = []
    if life.get("error"):
        errors.append(str(life["error"]))
    if str(life.get("exact_trace") or "").startswith(exacttrace.REFUSED):
        errors.append(f"{label}: the exact-differential trace file the server left was {life['exact_trace']}")
    flooded = [s for s in STREAMS if life.get("log_flood", {}).get(s)]
    if flooded:
        cap = life.get("log_cap_bytes")
        errors.append(f"{label}: log flood: {', '.join(flooded)} reached the cap of {cap} bytes (log_cap_mib)")
    scratch = life.get("scratch") or {}
    if isinstance(scratch, dict) and scratch.get("full") is True:
        errors.append(f"{label}: scratch flood: the server filled its /tmp, a tmpfs of {scratch.get('quota_bytes')} "
                      "bytes (its quota is log_cap_mib); what it wrote past that was refused")
    appeared = life.get("overrides_after") or []
    if appeared:
        errors.append(
            f"{label}: override file(s) {', '.join(map(str, appeared))} appeared while the server ran; the server reads "
            "them on every request, so the policy it ran under is unknown"
        )
    # The server itself is stopped (and, when it ignored SIGTERM, killed) below: the sweep's list
    # counts what it left behind, so its own pid is not listed again as a process it started.
    own = f"pid {life.get('pid')}:"
    swept = [s for s in life.get("swept") or [] if not str(s).startswith(own)]
    if swept:
        warnings.append(
            f"{label}: {len(swept)} process(es) the server started were still running after it stopped and were "
            f"killed: {', '.join(map(str, swept[:5]))}"
        )
    stop = life.get("stop") or {}
    if stop.get("needed_kill"):
        if stop.get("in_flight"):
            errors.append(f"{label}: killed with SIGKILL while a request was in flight")
        elif life.get("error"):
            # Already no verdict (e.g. it never became ready): the kill is a fact about teardown, not a request.
            warnings.append(f"{label}: did not exit within {stop.get('timeout_s')} s of SIGTERM and was killed with SIGKILL")
        else:
            warnings.append(
                f"{label}: did not exit within {stop.get('timeout_s')} s of SIGTERM and was killed with SIGKILL after "
                "every request was answered and logged (a slow teardown; tokens are unaffected)"
            )
    return errors, warnings


@dataclass(frozen=True)
class TargetJudgement:
    doc: TargetOnlyResult
    reference: TargetReference
    errors: list[str]
    warnings: list[str]


def choose_oracle(attempt: Path, keys: Sequence[str], settings: Settings) -> Oracle | None:
    """The strongest parity oracle the build's evidence allows, for every arm alike (docs/protocol.md).

    A trace line in any arm: the build speaks the strict dialect, and every request must print one.
    Otherwise an exact-differential trace collected from any arm (its tokens records: every arm must have
    one). Otherwise ds4ci's own tiny models, known from the target's SHA-256 as ds4ci hashed it (never from
    the answers' look): their answers spell their token IDs. Otherwise the answers' text, only where the
    config opts in ([gate] text_parity). Otherwise none; and none for a server that does not speak the protocol
    (``modeless.speaks_protocol``), whatever its answers."""
    if not modeless.speaks_protocol(attempt, keys):
        return None
    if modeless.prints_trace(attempt, keys):
        return ORACLE_TRACE
    if any(os.path.lexists(attempt / exact_trace_path(k)) for k in keys):  # a link too: it is refused when read
        return ORACLE_EXACT
    if known_target(settings.target_sha256) is not None:
        return ORACLE_WORDS
    if settings.text_parity:
        return ORACLE_TEXT
    return None


def no_ids_reason(banner: bool) -> str:
    """Why a build that has the mode cannot be judged: it prints no token IDs, and what would give it some."""
    seen = "banner seen" if banner else "countered summary seen"
    return (
        f"this build has the reference-exact mode ({seen}) but prints no token IDs: no [ds4-exact-verify-trace] "
        "line in any arm, no exact-differential trace file (DFLASH_DS4_EXACT_TRACE_PATH), and the target is not one "
        "of ds4ci's tiny models (whose answers spell their IDs); the gate "
        "cannot judge parity. Run the gate with the models of `ds4ci tiny-models`, or on a build that prints the trace, "
        "or opt in to judging the answers' text with [gate] text_parity = true (text parity, not token parity)"
    )


def judge_target(attempt: Path, settings: Settings, oracle: Oracle | None = ORACLE_TRACE) -> TargetJudgement:
    life = load_lifecycle(attempt, TARGET_KEY)
    errors, warnings = lifecycle_issues(TARGET_KEY, life)
    evidence: dict[str, int] = {}
    if errors:
        reference = TargetReference({}, ERROR, errors, False)
    else:
        observed, log, problems, evidence = observe(attempt, TARGET_KEY, life, False, settings, oracle)
        if oracle is None:
            reference = TargetReference({}, ERROR, ["target-only: the build prints no token IDs (no parity oracle)"], True)
        else:
            reference = judge_target_only(observed, len(settings.prompt_sha256s), [*log.problems, *problems], oracle)
    doc: TargetOnlyResult = {
        "verdict": reference.verdict,
        "reasons": reference.reasons,
        "deterministic": reference.deterministic,
        "server_log": f"{SERVERS}/{TARGET_KEY}/stderr.log",
        "prompts": [
            {
                "prompt_index": i,
                "n": len(reference.ids[i]) if i in reference.ids and oracle in TOKEN_ORACLES else None,
                "ids_sha256": ids_digest(reference.ids[i]) if i in reference.ids else None,
            }
            for i in range(len(settings.prompt_sha256s))
        ],
        "oracle": oracle,
        "evidence": evidence,
    }
    return TargetJudgement(doc, reference, errors, warnings)


def judge_width(
    attempt: Path, q: int, settings: Settings, reference: TargetReference, oracle: Oracle | None = ORACLE_TRACE,
) -> tuple[WidthResult, list[str]]:
    """One width's results entry and its warnings."""
    key = server_key(q)
    life = load_lifecycle(attempt, key)
    ready_s = life.get("ready_s")
    width: WidthResult = {
        "q": q, "verdict": ERROR, "reasons": [], "prompts": [],
        "server_log": f"{SERVERS}/{key}/stderr.log", "server_start_s": _seconds(ready_s),
        "oracle": oracle, "evidence": {},
    }
    errors, warnings = lifecycle_issues(key, life)
    if errors:
        width["reasons"] = errors
        return width, warnings
    observed, log, problems, width["evidence"] = observe(attempt, key, life, True, settings, oracle)
    if oracle is None:
        width["reasons"] = [f"q={q}: the build prints no token IDs (no parity oracle)"]
        return width, warnings
    for index, sha in enumerate(settings.prompt_sha256s):
        cell = judge_width_prompt(
            q, index, sha, observed, reference, log.banners > 0, [*log.problems, *problems], oracle)
        width["prompts"].append(cell)
    width["verdict"] = worst([c["verdict"] for c in width["prompts"]])
    width["reasons"] = list(dict.fromkeys(r for c in width["prompts"] for r in c["reasons"]))
    counts = [coverage.prompt_tokens(read_json(attempt, e["response"])) if e.get("answered") is True else None
              for e in life["requests"]]
    coverpolicy.apply(width, coverage.requests([request_steps(o.log, q) for o in observed], counts),
                      settings.require_coverage)
    return width, warnings


def _seconds(value: object) -> float | None:
    """A duration from lifecycle.json; anything but a number is recorded as unknown."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def overall(
    run_reasons: Sequence[str], target: TargetOnlyResult | None, widths: Sequence[WidthResult],
    checks: Sequence[CheckResult], build: BuildRecord | None = None, attempt: Path | None = None,
) -> tuple[Verdict, list[str]]:
    """The attempt's verdict: an error that stopped the run outranks everything judged after it.

    With ``attempt`` (the sealed evidence), a build that answered target-only requests but printed no
    reference-exact line in any arm gets the one reason of ``modeless.no_mode_reason`` (``modeless.SILENT`` where
    no arm printed a DS4 line at all)."""
    if run_reasons:
        return ERROR, list(run_reasons)
    if build is not None and build["status"] != PASS:  # nothing ran after a build that did not pass
        return (FAIL if build["status"] == FAIL else ERROR), [build_reason(build)]
    if target is not None and attempt is not None:
        modeless_reason = _modeless(attempt, widths)
        if modeless_reason:
            return ERROR, [modeless_reason]
    if target is not None and "oracle" in target and target["oracle"] is None:
        banner = any(w.get("evidence", {}).get(BANNER_FAMILY, 0) > 0 for w in widths)
        return ERROR, [no_ids_reason(banner)]
    verdicts: list[Verdict] = []
    reasons: list[str] = []
    if target is not None:
        if not target["deterministic"] and target["verdict"] == ERROR:
            return ERROR, list(target["reasons"])
        verdicts.append(target["verdict"])
        reasons.extend(target["reasons"])
        for width in widths:
            verdicts.append(width["verdict"])
            reasons.extend(crash.run_reason(r, target["verdict"] == PASS) for r in width["reasons"])
    for check in checks:
        verdicts.append(check["status"])
        if check["status"] != "pass":
            reasons.append(f"check {check['name']!r}: {check['status']}: {check['summary']}")
    if not verdicts:
        return ERROR, ["nothing was run: a negative-control runner needs [[checks]]"]
    return worst(verdicts), reasons


def _modeless(attempt: Path, widths: Sequence[WidthResult]) -> str | None:
    """The no-reference-exact-mode reason, only when target-only answered at least one request."""
    try:
        answered = any(e.get("answered") is True for e in load_lifecycle(attempt, TARGET_KEY)["requests"])
    except EvidenceError:
        return None
    keys = [TARGET_KEY, *(server_key(w["q"]) for w in widths)]
    return modeless.run_reason(attempt, keys) if answered else None
