"""One chat completion: decode, print the per-request log lines, build the answer.

Only the server's single worker calls ``Engine.complete``, one request at a time, like the real
server. By default every protocol line (banner, summary, trace) is on its stream before the
HTTP response is sent; the ``summary-after-response`` fault hands them back to be written after
it. Fault switches act here, at the exact place the real bug would.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ds4ci.judging.tinywords import word
from ds4ci.simulator.exactwriter import ExactTraceWriter
from ds4ci.simulator.faults import FAILURE_LINES
from ds4ci.simulator.logs import (
    AR_FALLBACK,
    BANNER,
    COMPARE_STEPS,
    Log,
    Pending,
    SummaryStyle,
    compare_line,
    summary_line,
    timing_step_line,
    token_line,
    trace_line,
)
from ds4ci.simulator.model import (
    VOCAB_SIZE,
    Decoded,
    Prompt,
    ToyModel,
    decode_sampled,
    decode_spec,
    decode_target,
    detokenize,
    tokenize,
)
from ds4ci.simulator.request import ChatRequest
from ds4ci.simulator.settings import FAST_PATH_MAX_Q, MAX_Q, SimSettings

_SCANF_INT = re.compile(r"^\s*([+-]?[0-9]+)")
SIM_STEP_MS = 0.42  # the simulated verify time per step, for the timing chatter only


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    after: tuple[Pending, ...] = ()  # lines to write once the response is sent
    done_line: str = ""  # the worker's closing chatter, written after the response


def error_body(message: str) -> dict[str, Any]:
    """The real server's error shape."""
    return {"error": {"message": message, "type": "invalid_request_error"}}


def _nudge(ids: tuple[int, ...], position: int, by: int) -> tuple[int, ...]:
    changed = list(ids)
    changed[position] = (changed[position] + by) % VOCAB_SIZE
    return tuple(changed)


def _read_override(path: Path) -> int | None:
    """An override file as the real server reads it (``fscanf("%d")``); None when absent or unreadable."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    match = _SCANF_INT.match(text)
    return int(match.group(1)) if match else None


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


class Engine:
    """Per-server state (request counter, prompts seen) lives here, never in module globals."""

    def __init__(self, settings: SimSettings, log: Log, exact: ExactTraceWriter | None = None) -> None:
        self._s = settings
        self._log = log
        self._exact = exact  # the exact-differential trace, in builds that write it
        self._target = ToyModel(bytes.fromhex(settings.target_sha256))
        self._draft = ToyModel(bytes.fromhex(settings.draft_sha256)) if settings.draft_sha256 else None
        self._lock = threading.Lock()
        self._requests = 0
        self._seen: dict[str, int] = {}

    def complete(self, request: ChatRequest, response_id: str) -> Answer:
        with self._lock:
            index = self._requests
            self._requests += 1
            seen = self._seen.get(request.prompt_text, 0)
            self._seen[request.prompt_text] = seen + 1
            return self._complete_locked(request, response_id, index, seen)

    def _complete_locked(self, request: ChatRequest, response_id: str, index: int, seen: int) -> Answer:
        s = self._s
        if s.fault("http-error"):
            self._log.line("[server] error: simulated internal failure (fault http-error)")
            return Answer(500, error_body("simulated internal server error"))
        if s.fault("http-400"):
            self._log.line("[server] request rejected: prompt_tokens exceeds max_ctx (fault http-400)")
            return Answer(400, error_body(f"prompt is too long for max_ctx={s.args.max_ctx} (simulated, fault http-400)"))
        if s.fault("exit-mid-request"):
            self._log.line("GGML_ASSERT: simulated device fault while decoding (fault exit-mid-request)")
            os._exit(1)
        if s.fault("hang-request"):
            self._log.line("[server] decoding stalled (fault hang-request)")
            threading.Event().wait()  # never set: this request is never answered

        prompt = tokenize(request.prompt_text)
        q_cap, decoded = self._decode(prompt, request)
        decoded = self._apply_token_faults(decoded, index, seen)
        if self._exact is not None:
            self._exact.request(prompt.ids, request.max_tokens, request.sampler.seed, decoded.ids)
        if s.knobs.token_delay_s > 0:
            # One sleep of exactly tokens x delay: benchmarks subtract this floor.
            time.sleep(len(decoded.ids) * s.knobs.token_delay_s)
        late = s.fault("summary-after-response")
        after: list[Pending] = []
        for pending in self._lines(decoded, q_cap):
            if late and pending.protocol:
                after.append(pending)
            else:
                self._log.line(pending.text, stdout=pending.stdout)
        return self._answer(request, response_id, prompt, decoded, tuple(after))

    # --- decoding ---------------------------------------------------------------------------------

    def _decode(self, prompt: Prompt, request: ChatRequest) -> tuple[int, Decoded]:
        s = self._s
        if request.sampler.needs_logit_processing():
            # Sampling or penalties: the real server's greedy-only verifier is skipped (plain AR).
            return s.policy.q, decode_sampled(self._target, prompt, request.max_tokens, request.sampler)
        if self._draft is None or request.max_tokens < 2:
            return s.policy.q, decode_target(self._target, prompt, request.max_tokens)
        q_cap, adaptive = self._per_request_width()
        return q_cap, decode_spec(
            self._target,
            self._draft,
            prompt,
            request.max_tokens,
            q_cap,
            # Reference-exact verification unless the approximate fused verifier is on (set or leaked).
            exact=s.policy.reference_exact and not s.fused_verify,
            adaptive=adaptive,
            draft_always_agrees=s.fault("all-accepted"),
            capture_runner_up=s.fault("capture-token0"),
        )

    def _per_request_width(self) -> tuple[int, bool]:
        """The width and adaptive policy of one request: the real decoder reads two override
        files on every request (here in DS4SIM_OVERRIDE_DIR, by default /tmp)."""
        policy = self._s.policy
        q_cap, adaptive = policy.q, policy.adaptive_width
        directory = self._s.knobs.override_dir
        awidth = _read_override(directory / "ds4_awidth")
        if awidth is not None:
            adaptive = awidth != 0
        spec_q = _read_override(directory / "ds4_spec_q")
        if spec_q is not None and 1 <= spec_q <= MAX_Q:
            q_cap = spec_q if policy.full_snap else min(spec_q, FAST_PATH_MAX_Q)
        if policy.seq_verify and q_cap > FAST_PATH_MAX_Q:
            self._log.line(f"[ds4-spec] sequential verify supports q<=4; capping requested q={q_cap} to 4")
            q_cap = FAST_PATH_MAX_Q
        return q_cap, adaptive and not policy.seq_verify

    def _apply_token_faults(self, d: Decoded, index: int, seen: int) -> Decoded:
        s = self._s
        ids = d.ids
        if s.fault("mismatch-last"):
            ids = _nudge(ids, len(ids) - 1, 1)
        if s.fault("nondeterministic-target") and index > 0:
            ids = _nudge(ids, min(index, len(ids) - 1), index)
        if s.fault("second-request-differs") and seen > 0:
            ids = _nudge(ids, len(ids) // 2, seen)
        d = replace(d, ids=ids)
        if s.fault("repeat-counters-differ") and seen > 0 and d.matched > 0:
            # Same tokens, same gen, but other counters than the first time.
            d = replace(d, steps=d.steps + 1, matched=d.matched - 1)
        if s.fault("target-shows-spec") and not d.speculation:
            # A target-only server that claims to have speculated.
            steps = max(1, d.gen // 2)
            d = replace(d, steps=steps, matched=d.gen - steps, offered=steps, speculation=True)
        return d

    # --- log lines --------------------------------------------------------------------------------

    def _lines(self, d: Decoded, q_cap: int) -> list[Pending]:
        """The request's log lines in order: protocol lines plus the decoder's chatter."""
        s = self._s
        lines: list[Pending] = []
        if d.speculation:
            if s.spec and s.policy.reference_exact and not s.fault("no-banner"):
                lines.append(Pending(BANNER))
            lines.extend(self._step_lines(d))
            lines.extend(Pending(line) for name, line in FAILURE_LINES.items() if s.fault(name))
            if s.fault("ar-fallback"):
                lines.append(Pending(AR_FALLBACK))
            if not s.fault("no-summary"):
                summary = Pending(self._summary(d, q_cap))
                lines.extend([summary, summary] if s.fault("duplicate-summary") else [summary])
            if d.steps > 0:
                total = SIM_STEP_MS * d.steps
                lines.append(Pending(
                    f"[ds4-spec-t] TOTAL {total:.1f} ms, {d.steps} steps ({SIM_STEP_MS:.1f} ms/step), {d.gen} tok "
                    f"({d.gen * 1000.0 / total:.1f} tok/s) | means: draft=0.1 head=0.0 save=0.1 verify=0.4 apply=0.0 "
                    "feat=0.0 ms",
                    protocol=False,
                ))
            rate = d.matched / d.offered if d.offered else 0.0
            lines.append(Pending(
                f"[deepseek4] DSpark decode: {len(d.ids)} tok in 0.001s (96000.0 tok/s) accept_rate={rate:.2f}",
                protocol=False,
            ))
        if s.trace:
            lines.extend(self._trace(d))
        return lines

    def _step_lines(self, d: Decoded) -> list[Pending]:
        """The loop's per-step lines (DS4_TIMING) and per-token lines (DS4_TOKEN_TRACE, LUCE-era builds), in
        the real loop's order: a step's compare line, its tokens, then its timing line."""
        s = self._s
        tokens = s.policy.token_trace and s.fault("token-trace-lines")
        lines: list[Pending] = []
        out = 0
        for step, detail in enumerate(d.detail):
            if s.policy.timing and step < COMPARE_STEPS and detail.drafts:
                line = compare_line(step, detail.position, detail.drafts, detail.targets, detail.accepted)
                lines.append(Pending(line, protocol=False))
            for slot, token in enumerate(detail.emitted, start=1):
                if tokens:
                    lines.append(Pending(token_line(out, step, slot, token, slot == detail.accepted + 1), protocol=False))
                out += 1
            after = step + 1
            if s.policy.timing and (after <= 4 or after % 32 == 0):
                width = len(detail.drafts) + 1
                lines.append(Pending(timing_step_line(after, width, detail.accepted, SIM_STEP_MS), protocol=False))
        return lines

    def _trace(self, d: Decoded) -> list[Pending]:
        s = self._s
        reference_exact, speculation = s.policy.reference_exact, d.speculation
        if s.fault("wrong-flags"):
            reference_exact, speculation = not reference_exact, not speculation
        shown: tuple[object, ...] = d.ids
        n = len(d.ids)
        if s.fault("trace-count-off"):
            n += 1
        if s.fault("empty-trace"):
            shown, n = (), 0
        if s.fault("malformed-trace") and d.ids:
            shown = (*d.ids[:-1], f"{d.ids[-1]}x")
        line = Pending(trace_line(reference_exact, speculation, n, shown), stdout=s.fault("trace-stdout"))
        return [line, line] if s.fault("duplicate-trace") else [line]

    def _summary(self, d: Decoded, q_cap: int) -> str:
        s = self._s
        no_counters = s.fault("no-counters") or s.fault("old-summary")
        if s.fused_verify:
            mode = "fused"
        elif s.policy.reference_exact:
            mode = "sequential"
        else:
            mode = "batched"
        style = SummaryStyle(
            counters=not no_counters and not s.fault("fork-dialect"),
            old_mean=s.fault("old-mean") or s.fault("old-summary"),
            float_counters=s.fault("float-counters"),
            verify_mode=mode if s.fault("verify-field") else None,
            tail=(" sampling=greedy draft=toy" if s.fault("extra-summary-fields") else "")
            + (" sampling=0 sample=0.12 ms/step" if s.fault("ms-step-tail") else ""),
        )
        return summary_line(
            gen=d.gen,
            steps=0 if s.fault("zero-steps") else d.steps,
            matched=d.matched,
            offered=d.offered,
            mean_steps=d.steps,
            q_cap=q_cap,
            full_snap=s.policy.full_snap and not s.fault("no-full-snap"),
            style=style,
        )

    # --- the response -----------------------------------------------------------------------------

    def _answer(
        self, request: ChatRequest, response_id: str, prompt: Prompt, d: Decoded, after: tuple[Pending, ...]
    ) -> Answer:
        words = self._s.fault("fork-dialect")  # that build ran on the tiny models: one word per token
        text = "".join(word(i) for i in d.ids) if words else detokenize(d.ids)
        text, stopped = _cut_at_stop(text, request.stop)
        n_prompt, n_out = len(prompt.ids), len(d.ids)
        finish = "stop" if stopped or n_out < request.max_tokens else "length"
        if self._s.fault("answer-text-differs"):
            text = f"{text} [not what the trace says]"
        reported = n_out + 1 if self._s.fault("answer-tokens-off") else n_out
        accept_rate = round(d.matched / d.offered, 6) if d.offered else 0.0
        decode_s = max(n_out * self._s.knobs.token_delay_s, 0.001)
        body: dict[str, Any] = {
            "id": response_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model or self._s.args.target.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": reported,
                "total_tokens": n_prompt + n_out,
                "completion_tokens_details": {"reasoning_tokens": 0},
                "timings": {
                    "prefill_ms": 0.1,
                    "decode_ms": round(decode_s * 1000.0, 1),
                    "decode_tokens_per_sec": round(n_out / decode_s, 1),
                },
                "accept_rate": accept_rate,
            },
        }
        done = (
            f"[server] chat DONE {response_id} ok=true in={n_prompt} effective_in={n_prompt} out={n_out} "
            f"{decode_s:.1f}s {n_out / decode_s:.1f} tok/s finish={finish} restore=false slot=0 prefix_len=0 "
            f"prefill=0.0s decode={decode_s:.1f}s({n_out / decode_s:.1f}tok/s) error=- detail=-"
        )
        return Answer(200, body, after=after, done_line=done)
