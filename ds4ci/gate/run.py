"""The parity gate: identities, then 1 target-only server + 1 reference-exact server per width.

Order, failing closed at every step:
1. a fresh attempt directory (evidence of every attempt, even one that stops at step 2);
2. the revisions, before any pull-request process runs (``runner.revisions``); the build and the
   checks, each sealed as it ends (``store.Seals``); every pin verified; stale override files refused;
3. the server binary copied privately (``privatebin``): what starts is the bytes that were hashed;
4. one target-only server answers every prompt ``repeats`` times, interleaved (A, B, ..., A, B);
5. one reference-exact server per width does the same (4 and 5 side by side with ``gate.devices`` or
   ``gate.parallel``: ``parallel``, every arm to its own end, each sealing its own folders alone);
6. after each server has stopped: override files checked again, its evidence sealed (the
   target-only server's raw evidence is judged once, to know whether the widths can run);
7. ``run.json`` (what no other file shows), the manifest (refused if a sealed file changed), ``results.json``
   derived from the sealed files alone by ``evidence.derive`` (as ``ds4ci verify`` does), promotion.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ds4ci import __version__, supervisor
from ds4ci.errors import EXIT_ERROR, Ds4ciError, NoVerdictError
from ds4ci.evidence import derive, results, store
from ds4ci.fileio import write_text_atomic
from ds4ci.gate import parallel, ready, settings, views
from ds4ci.gate.citation import cite_calibration
from ds4ci.gate.document import containment, initial_results, inputs, read_verified_prompt
from ds4ci.gate.interrupt import GateInterrupted, signals_raise
from ds4ci.gate.lifecycle import now, now_ms, process_record, timing
from ds4ci.gate.preload import preload
from ds4ci.gate.signer import UNGUARDED, Safeguards
from ds4ci.judging import judge, verdict
from ds4ci.judging.answer import read_answer
from ds4ci.judging.logtail import fit_reason
from ds4ci.log import Logger, as_logger
from ds4ci.options import policy
from ds4ci.options.config import GateConfig
from ds4ci.records import Results

if TYPE_CHECKING:  # imported when first used: http.client, ssl and psutil come after the first line
    from ds4ci.gate.privatebin import PrivateBinary
    from ds4ci.gate.server import Server, ServerSettings
    from ds4ci.runner.fingerprint import Background

Progress = Callable[[str], None]


@dataclass(frozen=True)
class GateOutcome:
    results: Results
    exit_code: int
    results_text: str | None = None  # ``results`` as validated and written into the evidence (None: not written)

    def write_results(self, path: Path) -> None:
        """Write results.json elsewhere too: the evidence's validated text, byte for byte, when there is one."""
        if self.results_text is None:
            results.write_atomic(path, self.results)
        else:
            write_text_atomic(path, self.results_text)


class _Run:
    """Mutable state of one gate run; everything it learns is written to a sealed file, from which
    results.json is derived (``doc`` only carries facts until they are written)."""

    def __init__(self, cfg: GateConfig, attempt: store.Attempt, progress: Logger, safe: Safeguards = UNGUARDED) -> None:
        self.cfg, self.safe = cfg, safe
        self.attempt = attempt
        self.progress = progress
        self.started = time.monotonic()
        self.started_at = now()
        self.doc: Results = initial_results(cfg, self.started_at)
        self.prompts: list[str] = []
        self.seals = store.Seals()
        self.binary: PrivateBinary | None = None  # the private copy of server_bin that servers start
        self.side_by_side = False  # arms run at once (gate.parallel): each seals its own folders alone
        self.interrupts = parallel.Interrupts()
        self.live = parallel.LiveServers(cfg.stop_timeout_s, progress)  # side by side: stopped by an interrupt
        self.lock = threading.Lock()  # seals and timings, shared by the arms' threads

    # -- steps ------------------------------------------------------------------------------
    def verify_identities(self) -> None:
        from ds4ci.runner import filelimit, identity

        cfg = self.cfg
        files = [cfg.server_bin, cfg.target, cfg.draft, *cfg.prompts] if cfg.role == "gate" else []
        if not files:
            return
        t0 = time.monotonic()
        if not cfg.hash_cache:
            self.progress(
                "hash cache not used: every file is read (under GitHub Actions a cache is used only from an explicit "
                "hash_cache_path, e.g. a root-owned one filled with `ds4ci hash-cache add`)"
            )
        with self.progress.group("input identities"):
            found = identity.identify(files, cache_path=cfg.hash_cache_path, use_cache=cfg.hash_cache, progress=self.progress,
                                      limits={"server_bin": filelimit.SERVER_BIN}, guard=self.safe.guard,
                                      trees=views.pr_trees(cfg))
        self.doc["timings"]["hashing_s"] = round(time.monotonic() - t0, 3)
        by_role = {f.role: f for f in found}
        self.doc["identities"] = {
            "server_bin": by_role["server_bin"].to_json(),
            "target": by_role["target"].to_json(),
            "draft": by_role["draft"].to_json(),
            "prompts": [by_role[p.role].to_json() for p in cfg.prompts],
        }
        self.prompts = [read_verified_prompt(p.path, by_role[p.role].sha256, views.pr_trees(cfg)) for p in cfg.prompts]

    def run_build(self) -> bool:
        """Build the server first when [build] is configured; False when the gate must stop here."""
        if self.cfg.build is None or self.cfg.role != "gate":
            return True
        from ds4ci.gate.build import run_build

        build = self.doc["build"] = run_build(self.cfg.build, self.attempt.path / "build", self.progress,
                                              self.cfg.log_cap_bytes, self.cfg.source_dir, views.pr_trees(self.cfg))
        self.seals.close(self.attempt.path, "the build ended", ["build"])
        return build["status"] == "pass"

    def record_fingerprint(self, taken: Background | None = None) -> None:
        """Probe the machine here, or record what ``taken`` probed meanwhile (its error raised here)."""
        from ds4ci.runner.fingerprint import fingerprint
        from ds4ci.runner.gpus import gpu_problems

        fp = self.doc["fingerprint"] = taken.result() if taken is not None else fingerprint(progress=self.progress)
        store.write_json(self.attempt.path / "preflight.json", fp)
        wrong = gpu_problems(self.cfg.gpu, fp, self.cfg.runner)
        if wrong:
            raise NoVerdictError(wrong[0])

    def record_revisions(self) -> None:
        """The source's revisions: --source-dir, else the working directory when it is a git checkout."""
        from ds4ci.judging.tree import stop_if_modified
        from ds4ci.runner.revisions import checkout_here, collect

        source = self.cfg.source_dir or checkout_here(self.progress)
        if source is None:  # nothing to describe (yet)
            return
        self.doc["revisions"] = collect(source, base_ref=self.cfg.base_ref, upstream_ref=self.cfg.upstream_ref)
        store.write_json(self.attempt.path / "revisions.json", self.doc["revisions"])
        stop_if_modified(self.doc["revisions"], self.cfg.build is not None, self.cfg.allow_dirty_tree)

    def run_checks(self) -> None:
        if not self.cfg.checks:
            return
        from ds4ci.gate.checks import run_checks

        self.doc["checks"] = run_checks(self.cfg.checks, self.attempt.path / "checks", progress=self.progress,
                                        log_cap_bytes=self.cfg.log_cap_bytes, trees=views.pr_trees(self.cfg))
        self.seals.close(self.attempt.path, "the checks ended", ["checks"])

    def copy_binary(self) -> None:
        """The server binary's private copy, its bytes those the pinned identity hashed."""
        from ds4ci.gate import privatebin

        self.binary = privatebin.copy_server(self.cfg, self.doc["identities"])
        self.progress(f"server_bin: servers start a private read-only copy (sha256 {self.binary.sha256[:16]}…)")

    def _settings(self, binary: PrivateBinary, device: str) -> ServerSettings:
        from ds4ci.gate.server import ServerSettings

        cfg = self.cfg
        view = views.server_view(cfg)
        return ServerSettings(
            binary=binary.path,
            target=cfg.target.path,
            target_device=device,
            max_ctx=cfg.max_ctx,
            chunk=cfg.chunk,
            args=cfg.server_args_all(),
            startup_timeout_s=cfg.startup_timeout_s,
            request_timeout_s=cfg.request_timeout_s,
            stop_timeout_s=cfg.stop_timeout_s,
            log_cap_bytes=cfg.log_cap_bytes,
            view=dataclasses.replace(view, ro=(*view.ro, binary.folder)),
            launcher=views.launcher(cfg),
        )

    def arm_environments(self) -> tuple[policy.ArmEnvironment, dict[int, policy.ArmEnvironment]]:
        cfg = self.cfg
        inherited = dict(os.environ)
        exact = supervisor.default().sandboxes_pr_code()  # the trace file lives in the sandbox's own scratch folder
        target_env = policy.target_only_env(inherited, cfg.mmvq_max_ncols, cfg.env_prefixes, exact)
        draft, prefixes = str(cfg.draft.path), cfg.env_prefixes
        spec_envs = {q: policy.reference_exact_env(inherited, cfg.mmvq_max_ncols, prefixes, draft, q, exact) for q in cfg.widths}
        arms = {policy.TARGET_ONLY: target_env.policy()}
        difference: list[str] = []
        for q, env in spec_envs.items():
            arms[f"{policy.REFERENCE_EXACT} q={q}"] = env.policy()
            forbidden = policy.check_only_activation_differs(target_env, env)
            if forbidden:
                raise NoVerdictError(f"arm environments differ beyond activation variables: {', '.join(forbidden)}")
            difference += [f"{name} (q={q}): target-only={target_env.env.get(name)!r} reference-exact={env.env.get(name)!r}"
                           for name in policy.difference(target_env, env)]
        common, removed = policy.common_policy(cfg.mmvq_max_ncols, prefixes, exact), policy.removed_policy(inherited)
        self.doc["policy"] = {"common": common, "removed": removed, "arms": arms, "difference": difference}  # as run
        store.write_json(self.attempt.path / "env" / "policy.json", self.doc["policy"])
        store.write_json(self.attempt.path / "env" / "provenance.json", self.doc["provenance"])
        return target_env, spec_envs

    def _serve(self, server: Server, key: str, entries: list[dict[str, Any]]) -> None:
        """Every prompt, ``repeats`` times, interleaved; each exchange recorded as it happens."""
        from ds4ci.gate.loopback import HttpAnswerError

        for repeat in range(self.cfg.repeats):
            for index, prompt in enumerate(self.prompts):
                self.interrupts.check()  # side by side: an interrupt stops the arm before its next request
                request, response = judge.exchange_paths(key, index, repeat)
                error_body = response.removesuffix(".json") + ".error-body"
                entry: dict[str, Any] = {
                    "index": len(entries), "prompt_index": index, "repeat": repeat,
                    "request": request, "response": None, "answered": False,  # named once it exists
                }
                body = judge.request_body(prompt, self.cfg.seed, self.cfg.max_tokens)
                store.write_json(self.attempt.path / entry["request"], body)
                entries.append(entry)
                try:
                    exchange = server.complete(body, keep_error_body=self.attempt.path / error_body)
                except HttpAnswerError as exc:  # the body the server sent is evidence: name it
                    entry.update({"response": error_body, "http_status": exc.status_code})
                    raise
                entry["response"] = response
                store.write_json(self.attempt.path / entry["response"], exchange.response)
                entry.update({
                    "answered": True, "elapsed_s": round(exchange.elapsed_s, 3),
                    "stderr_range": list(exchange.stderr_range), "stdout_range": list(exchange.stdout_range),
                })
                tokens = read_answer(exchange.response).completion_tokens  # 0 is a count too; None is "?"
                self.progress(
                    f"{server.label}: prompt {index} request {repeat + 1}/{self.cfg.repeats}: answered in "
                    f"{exchange.elapsed_s:.2f} s ({'?' if tokens is None else tokens} completion tokens)"
                )

    def _run_server(self, q: int | None, env: policy.ArmEnvironment, device: str) -> None:
        """Start one server on ``device``, send every request, stop it, and record its lifecycle (never judges)."""
        key, label = judge.server_key(q), judge.server_label(q)
        server_dir = self.attempt.path / judge.SERVERS / key
        assert self.binary is not None  # run_arms copies it first
        # Hashed right before the start; a changed copy stops the run (no later server may start either).
        binary = {"path": str(self.binary.path), "sha256": self.binary.verified()}
        life: dict[str, Any] = {
            "key": key, "q": q, "requests": [], "error": None, "binary": binary, "device": device, "started_at": now_ms(),
        }
        t0 = time.monotonic()
        from ds4ci.gate.server import Server

        server = Server(self._settings(self.binary, device), env.env, server_dir, self.progress, label)
        # Side by side, the arms share one log group (GitHub's groups do not nest); every line names its arm.
        group = contextlib.nullcontext() if self.side_by_side else self.progress.group(f"{label} server")
        try:
            with group:
                try:
                    self.interrupts.check()
                    self.live.add(server)
                    self.progress(f"{label}: on {device}")
                    server.start()
                    self._serve(server, key, life["requests"])
                finally:
                    server.stop()
        except NoVerdictError as exc:
            stopped = self.interrupts.reason if self.interrupts.event.is_set() else None  # side by side: an interrupt
            life["error"] = fit_reason(str(exc) if stopped is None or isinstance(exc, GateInterrupted)
                                       else f"{stopped} ({label} was stopped: {str(exc).splitlines()[0]})")
            if isinstance(exc, GateInterrupted):
                raise
            self.progress(f"{label}: no verdict: {str(exc).splitlines()[0]}")
        except Exception as exc:  # recorded (the requests stop short), then the run's own handler says what
            life["error"] = f"{label}: stopped by {type(exc).__name__}: {str(exc)[:500]}"
            raise
        finally:
            life["finished_at"] = now_ms()
            with self.lock:
                self.doc["timings"]["servers"].append(timing(env.arm, q, server, t0))
            if server.child is not None:
                life.update(process_record(server, self.cfg.stop_timeout_s, self.cfg.log_cap_bytes))
            life.update(exact_trace=server.exact_trace, overrides_after=settings.present_overrides(self.cfg))
            if server_dir.is_dir():
                store.write_json(server_dir / judge.LIFECYCLE, life)
            with self.lock:
                self.seals.close(self.attempt.path, f"the {label} server stopped",
                                 [f"{judge.SERVERS}/{key}", f"{judge.REQUESTS}/{key}"], only=self.side_by_side)

    def run_arms(self) -> None:
        from ds4ci.runner.fingerprint import Background

        taken: Background | None = Background(progress=self.progress)  # probes run while the first server loads
        if self.cfg.gpu:  # a stated GPU is checked before any server starts
            self.record_fingerprint(taken)
            taken = None
        results.preload()
        cfg, arms = self.cfg, 1 + len(self.cfg.widths)
        slots = parallel.slots(cfg.arm_devices(), cfg.parallel)
        try:
            target = self.doc["identities"]["target"]
            target_sha256 = target["sha256"] if target is not None else None
            parallel.check_sharing(cfg.arm_devices(), cfg.parallel, arms, target_sha256)  # before any server starts
            self.copy_binary()
            target_env, spec_envs = self.arm_environments()
            if parallel.concurrent(cfg.arm_devices(), cfg.parallel, arms) > 1:  # every arm to its own end
                self.side_by_side = True
                envs: list[tuple[int | None, policy.ArmEnvironment]] = [(None, target_env), *spec_envs.items()]
                try:
                    parallel.side_by_side(envs, slots, lambda arm, device: self._run_server(arm[0], arm[1], device),
                                          self.live, self.interrupts)
                finally:  # in arm order, as in a sequential run
                    self.doc["timings"]["servers"].sort(key=lambda t: [None, *spec_envs].index(t["q"]))
                return
            sealed = settings.judge_settings(cfg, [p["sha256"] for p in self.doc["identities"]["prompts"]])
            self._run_server(None, target_env, slots[0])
        finally:
            if taken is not None:  # a fingerprint error stands first, as when the probes ran first
                self.record_fingerprint(taken)
        # Judged here only to know whether the widths can run: results.json is derived after sealing.
        if judge.judge_target(self.attempt.path, sealed).errors:  # without a target-only reference no width can be judged
            return
        for q in cfg.widths:
            self._run_server(q, spec_envs[q], slots[0])

    # -- verdict and evidence ---------------------------------------------------------------
    def seal_run_facts(self) -> None:
        """Write what no other sealed file shows (run.json), and every carrier the derivation reads."""
        doc, path = self.doc, self.attempt.path
        store.write_json(path / derive.IDENTITIES, doc["identities"])  # null before hashing ran
        for rel, value in ((derive.POLICY, doc["policy"]), (derive.PROVENANCE, doc["provenance"])):
            if not (path / rel).exists():  # the arms never got their environments: the common part still holds
                store.write_json(path / rel, value)
        doc["timings"]["total_s"] = round(time.monotonic() - self.started, 3)
        store.write_json(path / derive.RUN, {"errors": list(doc["reasons"])[: derive.MAX_REASONS], "finished_at": now(),
            "timings": doc["timings"], "containment": containment(), "signing": self.safe.signing,
            "evidence_dir": str(self.attempt.root), "attempt_id": self.attempt.attempt_id})

    def finish(self) -> GateOutcome:
        """Seal the attempt, derive results.json from the sealed files alone, promote by the derived verdict."""
        try:
            self.seal_run_facts()
            manifest_sha256 = store.seal(self.attempt, inputs(self.doc["identities"]), self.seals)
            doc = derive.derive(self.attempt.path)
            if doc["evidence"]["manifest_sha256"] != manifest_sha256:
                raise NoVerdictError("manifest.json changed between sealing and deriving results.json")
            text: str | None = results.write_atomic(self.attempt.path / store.RESULTS, doc)
            store.promote(self.attempt, doc["verdict"])
        except Exception as exc:  # a bug included: no verdict, one line, never a traceback
            # The attempt stays in attempts/ (never a partial final directory); no verdict can stand.
            detail = _detail(exc)
            doc = self.unsealed(f"evidence could not be sealed, derived and promoted: {detail}")
            text = None
            with contextlib.suppress(OSError):
                text = results.write_atomic(self.attempt.path / store.RESULTS, doc)
        return GateOutcome(doc, doc["exit_code"], text)

    def unsealed(self, reason: str) -> Results:
        """No verdict: the document of an attempt that could not be sealed (it stays in attempts/)."""
        doc = self.doc
        doc["errors"] = [*doc["reasons"], reason][: derive.MAX_REASONS]
        doc["verdict"], doc["exit_code"], doc["reasons"] = verdict.ERROR, EXIT_ERROR, list(doc["errors"])
        doc["finished_at"] = now()
        doc["containment"] = containment()
        doc["evidence"].update({"dir": str(self.attempt.path), "manifest_sha256": None, "diagnostics": None})
        return doc


def _detail(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc} ({exc.filename or ''})"
    if isinstance(exc, (NoVerdictError, derive.DeriveError)):
        return str(exc)
    return f"internal error (a bug in ds4ci, please report it): {type(exc).__name__}: {exc}".splitlines()[0][:1000]


def run_gate(cfg: GateConfig, progress: Progress | Logger | None = None, safe: Safeguards = UNGUARDED) -> GateOutcome:
    """Run the whole gate. Never raises for a verdict; raises only if no attempt could be created.

    Progress goes to *progress* (default: ``Logger.from_env()`` on stderr): one group per server, build and check.
    """
    progress = Logger.from_env() if progress is None else as_logger(progress)
    with signals_raise(held=True) as interrupted:  # a signal while the attempt is created stops it in the try below
        attempt = store.start_attempt(cfg.evidence_dir, cfg.runner)
        progress(f"attempt {attempt.attempt_id} in {attempt.path}")
        run = _Run(cfg, attempt, progress, safe)
        store.write_json(attempt.path / "attempt.json", {
            "ds4ci_version": __version__, "argv": sys.argv, "started_at": run.started_at, "notes": run.doc.get("warnings", []),
            **{key: run.doc[key] for key in ("settings", "runner", "reproduce")}})
        try:
            interrupted()  # between steps: a signal a step's helper swallowed stops the run here
            ready.prepare(cfg, progress)  # a pinned file missing, [sandbox] require: stops here, before any PR process
            cite_calibration(cfg, run.doc, attempt.path, safe.keys, progress)  # read and verified before any PR process
            preload()  # everything ds4ci imports later is loaded before PR code runs
            run.record_revisions()  # before any PR process: git never runs on a .git the build wrote
            interrupted()
            built = run.run_build()  # a PR that does not build is a fail: no server starts
            interrupted()
            if built:  # checks before hashing and the servers: no check runs after a file is hashed or judged
                run.run_checks()
                run.verify_identities()
                settings.refuse_stale_overrides(cfg)
                interrupted()
            if built and cfg.role == "gate":
                run.run_arms()  # fingerprint included
            else:
                run.record_fingerprint()
        except Ds4ciError as exc:
            run.doc["reasons"].append(fit_reason(str(exc)))
            progress(f"no verdict: {exc}")
        except Exception as exc:  # evidence not written mid-run (disk full, ...) or a bug: no verdict, never a traceback
            message = ("I/O error during the run: " if isinstance(exc, OSError) else "") + _detail(exc)
            run.doc["reasons"].append(message)
            progress(f"no verdict: {message}")
        finally:
            if run.binary is not None:
                run.binary.remove()
        return run.finish()
