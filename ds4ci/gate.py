"""The parity gate: identities, then 1 target-only server + 1 reference-exact server per width.

Order, failing closed at every step (issue 2):
1. a fresh attempt directory (evidence of every attempt, even one that stops at step 2);
2. every pinned SHA-256 verified, and stale override files refused, before any server starts;
3. one target-only server answers every prompt ``repeats`` times, interleaved (A, B, ..., A, B);
4. one reference-exact server per width does the same;
5. verdicts per width and prompt (``verdict.py``), results.json, manifest, atomic promotion.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from ds4ci import __version__, evidence, policy, results
from ds4ci.config import GateConfig
from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, Ds4ciError, NoVerdictError
from ds4ci.protocol import parse_request_log
from ds4ci.server import Server, ServerSettings, launch
from ds4ci.verdict import ERROR, FAIL, NOT_RUN, PASS, Observed, ids_digest, judge_target_only, judge_width_prompt, worst

Progress = Callable[[str], None]
EXIT_FOR_VERDICT = {PASS: EXIT_PASS, FAIL: EXIT_FAIL, ERROR: EXIT_ERROR, NOT_RUN: EXIT_ERROR}


class GateInterrupted(NoVerdictError):
    """ds4ci received SIGINT or SIGTERM; servers are stopped and the attempt kept."""


@dataclass(frozen=True)
class GateOutcome:
    results: dict[str, Any]
    exit_code: int


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stderr_progress(message: str) -> None:
    print(f"[ds4ci {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into an exception so every server is stopped on the way out."""

    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:  # already unwinding: let the cleanup that is running finish
            return
        fired.append(signum)
        raise GateInterrupted(f"ds4ci was interrupted by {signal.Signals(signum).name}; no verdict")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def reproduce_command(cfg: GateConfig) -> str:
    parts = ["ds4ci", "gate"]
    if cfg.config_file is not None:
        parts += ["--config", str(cfg.config_file)]
    parts += [
        "--server-bin", str(cfg.server_bin.path),
        "--target", str(cfg.target.path), "--target-sha256", cfg.target.sha256 or "",
        "--draft", str(cfg.draft.path), "--draft-sha256", cfg.draft.sha256 or "",
    ]
    if cfg.server_bin.sha256:
        parts += ["--server-sha256", cfg.server_bin.sha256]
    for prompt in cfg.prompts:
        parts += ["--prompt-file", str(prompt.path), "--prompt-sha256", prompt.sha256 or ""]
    parts += [
        "--runner", cfg.runner, "--widths", ",".join(str(q) for q in cfg.widths),
        "--max-tokens", str(cfg.max_tokens), "--seed", str(cfg.seed), "--repeats", str(cfg.repeats),
        "--target-device", cfg.target_device, "--max-ctx", str(cfg.max_ctx), "--chunk", str(cfg.chunk),
        "--mmvq-max-ncols", str(cfg.mmvq_max_ncols), "--evidence-dir", str(cfg.evidence_dir),
    ]
    text = shlex.join(parts)
    return text if len(text) <= 4000 else text[:3996] + " ..."


def _settings_json(cfg: GateConfig) -> dict[str, Any]:
    return {
        "widths": list(cfg.widths),
        "max_tokens": cfg.max_tokens,
        "seed": cfg.seed,
        "repeats": cfg.repeats,
        "target_device": cfg.target_device,
        "max_ctx": cfg.max_ctx,
        "chunk": cfg.chunk,
        "mmvq_max_ncols": cfg.mmvq_max_ncols,
        "startup_timeout_s": cfg.startup_timeout_s,
        "request_timeout_s": cfg.request_timeout_s,
        "stop_timeout_s": cfg.stop_timeout_s,
    }


def refuse_stale_overrides(cfg: GateConfig) -> None:
    present = [str(p) for p in cfg.stale_override_files if p.exists() or p.is_symlink()]
    if present:
        raise NoVerdictError(
            "stale override file(s) present that silently change server policy: "
            f"{', '.join(present)}; remove them (they are left over from manual runs) and run again"
        )


class _Run:
    """Mutable state of one gate run; everything it learns ends up in results.json."""

    def __init__(self, cfg: GateConfig, attempt: evidence.Attempt, progress: Progress) -> None:
        self.cfg = cfg
        self.attempt = attempt
        self.progress = progress
        self.started = time.monotonic()
        self.started_at = _now()
        self.doc: dict[str, Any] = {
            "schema": results.SCHEMA_ID,
            "ds4ci_version": __version__,
            "runner": {"name": cfg.runner, "role": cfg.role, "negative_control_for": cfg.negative_control_for},
            "verdict": NOT_RUN,
            "reasons": [],
            "exit_code": EXIT_ERROR,
            "started_at": self.started_at,
            "finished_at": self.started_at,
            "timings": {"total_s": 0.0, "hashing_s": 0.0, "servers": []},
            "identities": {"server_bin": None, "target": None, "draft": None, "prompts": []},
            "settings": _settings_json(cfg),
            "policy": {"common": policy.common_policy(cfg.mmvq_max_ncols), "removed": [], "arms": {}, "difference": []},
            "server": {"name": None, "version": None},
            "target_only": {"verdict": NOT_RUN, "reasons": [], "deterministic": False, "prompts": [], "server_log": None},
            "widths": [],
            "evidence": {"dir": "", "manifest_sha256": None, "diagnostics": None},
            "fingerprint": None,
            "revisions": None,
            "checks": [],
            "reproduce": reproduce_command(cfg),
        }
        self.prompts: list[str] = []

    # -- steps ------------------------------------------------------------------------------
    def verify_identities(self) -> None:
        from ds4ci.identity import identify

        cfg = self.cfg
        files = [cfg.server_bin, cfg.target, cfg.draft, *cfg.prompts] if cfg.role == "gate" else []
        if not files:
            return
        t0 = time.monotonic()
        found = identify(files, cache_path=cfg.hash_cache_path, use_cache=cfg.hash_cache, progress=self.progress)
        self.doc["timings"]["hashing_s"] = round(time.monotonic() - t0, 3)
        by_role = {f.role: f for f in found}
        self.doc["identities"] = {
            "server_bin": by_role["server_bin"].to_json(),
            "target": by_role["target"].to_json(),
            "draft": by_role["draft"].to_json(),
            "prompts": [by_role[p.role].to_json() for p in cfg.prompts],
        }
        evidence.write_json(self.attempt.path / "identities.json", self.doc["identities"])
        self.prompts = [_read_verified_prompt(p.path, by_role[p.role].sha256) for p in cfg.prompts]

    def record_fingerprint(self) -> None:
        from ds4ci.preflight import fingerprint

        self.doc["fingerprint"] = fingerprint(progress=self.progress)
        evidence.write_json(self.attempt.path / "preflight.json", self.doc["fingerprint"])

    def record_revisions(self) -> None:
        if self.cfg.source_dir is None:
            return
        from ds4ci.revisions import collect

        self.doc["revisions"] = collect(
            self.cfg.source_dir, base_ref=self.cfg.base_ref, upstream_ref=self.cfg.upstream_ref
        )
        evidence.write_json(self.attempt.path / "revisions.json", self.doc["revisions"])

    def run_checks(self) -> None:
        if not self.cfg.checks:
            return
        from ds4ci.checks import run_checks

        self.doc["checks"] = run_checks(self.cfg.checks, self.attempt.path / "checks", progress=self.progress)

    def _settings(self) -> ServerSettings:
        cfg = self.cfg
        return ServerSettings(
            binary=cfg.server_bin.path,
            target=cfg.target.path,
            target_device=cfg.target_device,
            max_ctx=cfg.max_ctx,
            chunk=cfg.chunk,
            startup_timeout_s=cfg.startup_timeout_s,
            request_timeout_s=cfg.request_timeout_s,
            stop_timeout_s=cfg.stop_timeout_s,
        )

    def arm_environments(self) -> tuple[policy.ArmEnvironment, dict[int, policy.ArmEnvironment]]:
        cfg = self.cfg
        inherited = dict(os.environ)
        target_env = policy.target_only_env(inherited, cfg.mmvq_max_ncols)
        spec_envs = {
            q: policy.reference_exact_env(inherited, cfg.mmvq_max_ncols, str(cfg.draft.path), q) for q in cfg.widths
        }
        arms = {policy.TARGET_ONLY: target_env.policy()}
        difference: list[str] = []
        for q, env in spec_envs.items():
            arms[f"{policy.REFERENCE_EXACT} q={q}"] = env.policy()
            forbidden = policy.check_only_activation_differs(target_env, env)
            if forbidden:
                raise NoVerdictError(f"arm environments differ beyond activation variables: {', '.join(forbidden)}")
            for name in policy.difference(target_env, env):
                entry = f"{name} (q={q}): target-only={target_env.env.get(name)!r} reference-exact={env.env.get(name)!r}"
                difference.append(entry)
        self.doc["policy"].update({"removed": policy.removed_policy(inherited), "arms": arms, "difference": difference})
        evidence.write_json(self.attempt.path / "env" / "policy.json", self.doc["policy"])
        return target_env, spec_envs

    def _serve(self, server: Server, key: str) -> list[Observed]:
        """Every prompt, ``repeats`` times, interleaved; each request's log slice saved as evidence."""
        observed = []
        for repeat in range(self.cfg.repeats):
            for index, prompt in enumerate(self.prompts):
                exchange = server.complete(prompt, self.cfg.seed, self.cfg.max_tokens)
                stem = self.attempt.path / "requests" / key / f"p{index}-r{repeat + 1}"
                evidence.write_json(stem.with_suffix(".request.json"), exchange.request)
                evidence.write_json(stem.with_suffix(".response.json"), exchange.response)
                evidence.write_lines(stem.with_suffix(".log"), exchange.log_lines)
                log = parse_request_log(exchange.log_lines)
                evidence.write_json(stem.with_suffix(".tokens.json"), [list(t.ids) for t in log.traces])
                n = f"{len(log.traces[0].ids)} IDs" if len(log.traces) == 1 else f"{len(log.traces)} traces"
                self.progress(
                    f"{server.label}: prompt {index} request {repeat + 1}/{self.cfg.repeats}: "
                    f"{n} in {exchange.elapsed_s:.2f} s"
                )
                observed.append(Observed(index, repeat, log))
        return observed

    @staticmethod
    def _unclean_stop(server: Server | None) -> str | None:
        if server is None or not server.needed_kill:
            return None
        return (
            f"{server.label}: server did not stop within --stop-timeout after SIGTERM and was killed with SIGKILL; "
            "a server that does not shut down cleanly gives no trustworthy verdict"
        )

    def _server_timing(self, arm: str, q: int | None, server: Server | None, t0: float) -> None:
        self.doc["timings"]["servers"].append({
            "arm": arm, "q": q,
            "ready_s": round(server.ready_s, 3) if server and server.ready_s is not None else None,
            "run_s": round(time.monotonic() - t0, 3),
        })

    def run_target_only(self, env: policy.ArmEnvironment) -> tuple[list[Observed], str]:
        key = "target-only"
        t0 = time.monotonic()
        server: Server | None = None
        try:
            with launch(self._settings(), env.env, self.attempt.path / "servers" / key, self.progress, key) as server:
                info = (server.props or {}).get("server")
                info = info if isinstance(info, dict) else {}
                self.doc["server"] = {
                    "name": _text_or_none(info.get("name")),
                    "version": _text_or_none(info.get("version")),
                }
                observed = self._serve(server, key)
        finally:
            self._server_timing(policy.TARGET_ONLY, None, server, t0)
        unclean = self._unclean_stop(server)
        if unclean:
            self.doc["reasons"].append(unclean)
        return observed, f"servers/{key}/stderr.log"

    def run_width(self, q: int, env: policy.ArmEnvironment, reference: Any) -> dict[str, Any]:
        key = f"q{q}"
        label = f"reference-exact q={q}"
        t0 = time.monotonic()
        server: Server | None = None
        width: dict[str, Any] = {
            "q": q, "verdict": ERROR, "reasons": [], "prompts": [],
            "server_log": f"servers/{key}/stderr.log", "server_start_s": None,
        }
        try:
            with launch(self._settings(), env.env, self.attempt.path / "servers" / key, self.progress, label) as server:
                observed = self._serve(server, key)
                startup = parse_request_log(server.startup_log())
                banner = startup.banners > 0 or any(o.log.banners > 0 for o in observed)
                width["server_start_s"] = round(server.ready_s or 0.0, 3)
        except NoVerdictError as exc:
            if isinstance(exc, GateInterrupted):
                raise
            width["reasons"].append(str(exc))
            self.progress(f"{label}: no verdict: {str(exc).splitlines()[0]}")
            return width
        finally:
            self._server_timing(policy.REFERENCE_EXACT, q, server, t0)
        for index, prompt in enumerate(self.cfg.prompts):
            cell = judge_width_prompt(q, index, prompt.sha256 or "", observed, reference, banner)
            width["prompts"].append(cell)
        width["verdict"] = worst([c["verdict"] for c in width["prompts"]])
        width["reasons"] = [r for c in width["prompts"] for r in c["reasons"]]
        unclean = self._unclean_stop(server)
        if unclean:
            width["verdict"] = worst([width["verdict"], ERROR])
            width["reasons"].append(unclean)
        return width

    def run_arms(self) -> None:
        target_env, spec_envs = self.arm_environments()
        target_observed, target_log = self.run_target_only(target_env)
        reference = judge_target_only(target_observed, len(self.prompts))
        self.doc["target_only"] = {
            "verdict": reference.verdict,
            "reasons": reference.reasons,
            "deterministic": reference.deterministic,
            "server_log": target_log,
            "prompts": [
                {
                    "prompt_index": i,
                    "n": len(reference.ids[i]) if i in reference.ids else None,
                    "ids_sha256": ids_digest(reference.ids[i]) if i in reference.ids else None,
                }
                for i in range(len(self.prompts))
            ],
        }
        for q in self.cfg.widths:
            self.doc["widths"].append(self.run_width(q, spec_envs[q], reference))

    # -- verdict and evidence ---------------------------------------------------------------
    def overall(self) -> tuple[str, list[str]]:
        doc = self.doc
        if doc["reasons"]:  # an error that stopped the run before it could judge
            return ERROR, list(doc["reasons"])
        verdicts: list[str] = []
        reasons: list[str] = []
        if self.cfg.role == "gate":
            target = doc["target_only"]
            if not target["deterministic"] and target["verdict"] == ERROR:
                return ERROR, list(target["reasons"])
            verdicts.append(target["verdict"])
            reasons.extend(target["reasons"])
            for width in doc["widths"]:
                verdicts.append(width["verdict"])
                reasons.extend(width["reasons"])
        for check in doc["checks"]:
            verdicts.append({"pass": PASS, "fail": FAIL}.get(check["status"], ERROR))
            if check["status"] != "pass":
                reasons.append(f"check {check['name']!r}: {check['status']}: {check['summary']}")
        if not verdicts:
            return ERROR, ["nothing was run: a negative-control runner needs [[checks]]"]
        return worst(verdicts), reasons

    def finish(self) -> GateOutcome:
        verdict, reasons = self.overall()
        doc = self.doc
        doc["verdict"], doc["reasons"] = verdict, reasons[:200]
        doc["exit_code"] = EXIT_FOR_VERDICT[verdict]
        doc["finished_at"] = _now()
        doc["timings"]["total_s"] = round(time.monotonic() - self.started, 3)
        final = self.attempt.final_path(verdict)
        doc["evidence"]["dir"] = str(final)
        if verdict != PASS:
            doc["evidence"]["diagnostics"] = str(final / "servers")
        try:
            doc["evidence"]["manifest_sha256"] = evidence.seal(self.attempt, _inputs(doc["identities"]))
            results.write_atomic(self.attempt.path / evidence.RESULTS, doc)
            evidence.promote(self.attempt, verdict)
        except (OSError, NoVerdictError) as exc:
            # The attempt stays in attempts/ (never a partial final directory); no verdict can stand.
            detail = exc if isinstance(exc, NoVerdictError) else f"{exc.strerror or exc} ({exc.filename or ''})"
            doc["verdict"], doc["exit_code"] = ERROR, EXIT_ERROR
            doc["reasons"] = [*doc["reasons"], f"evidence could not be sealed and promoted: {detail}"][:200]
            doc["evidence"]["dir"] = str(self.attempt.path)
            doc["evidence"]["manifest_sha256"] = None
            with contextlib.suppress(OSError):
                results.write_atomic(self.attempt.path / evidence.RESULTS, doc)
        return GateOutcome(doc, doc["exit_code"])


def _read_verified_prompt(path: Path, sha256: str) -> str:
    """The prompt text sent to the servers: exactly the bytes whose SHA-256 was just verified."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NoVerdictError(f"prompt file {path} became unreadable after it was verified: {exc.strerror or exc}") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise NoVerdictError(f"prompt file {path} changed after its SHA-256 was verified; refusing to send it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoVerdictError(f"prompt file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _inputs(identities: dict[str, Any]) -> list[dict[str, Any]]:
    """Every input file's identity for the manifest (none before hashing ran)."""
    singles = [identities[k] for k in ("server_bin", "target", "draft") if identities[k] is not None]
    return [*singles, *identities["prompts"]]


def _text_or_none(value: Any) -> str | None:
    return value[:4096] if isinstance(value, str) else None


def run_gate(cfg: GateConfig, progress: Progress = stderr_progress) -> GateOutcome:
    """Run the whole gate. Never raises for a verdict; raises only if no attempt could be created."""
    attempt = evidence.start_attempt(cfg.evidence_dir, cfg.runner)
    progress(f"attempt {attempt.attempt_id} in {attempt.path}")
    run = _Run(cfg, attempt, progress)
    evidence.write_json(attempt.path / "attempt.json", {
        "ds4ci_version": __version__, "argv": sys.argv, "started_at": run.started_at,
        "settings": run.doc["settings"], "runner": run.doc["runner"],
    })
    with _signals_raise():
        try:
            run.verify_identities()
            refuse_stale_overrides(cfg)
            run.record_revisions()
            run.record_fingerprint()
            if cfg.role == "gate":
                run.run_arms()
            run.run_checks()
        except Ds4ciError as exc:
            run.doc["reasons"].append(str(exc))
            progress(f"no verdict: {exc}")
        except OSError as exc:  # evidence could not be written mid-run (disk full, read-only, ...)
            run.doc["reasons"].append(f"I/O error during the run: {exc.strerror or exc} ({exc.filename or ''})")
            progress(f"no verdict: {exc}")
        return run.finish()
