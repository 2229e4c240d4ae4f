"""One chat completion: parse the request, decode, print the per-request log lines, answer.

Requests run one at a time under a lock, like the real single-slot server, and every log line a
request produces is on stderr before its HTTP response is sent, so the gate's per-request cut
of the log sees all of it. Fault switches act here, at the exact place the real bug would.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from ds4ci import __version__
from ds4ci.errors import ProtocolError
from ds4ci.simulator.logs import Log, banner_line, summary_line, trace_line
from ds4ci.simulator.model import (
    VOCAB_SIZE,
    Decoded,
    Prompt,
    ToyModel,
    decode_spec,
    decode_target,
    detokenize,
    tokenize,
)
from ds4ci.simulator.settings import SimSettings

DEFAULT_MAX_TOKENS = 128
_ROLES = ("system", "user", "assistant")


class BadRequest(ProtocolError):
    """The client's request does not have the documented shape (HTTP 400)."""

    status = 400


@dataclass(frozen=True)
class ChatRequest:
    model: str
    prompt_text: str
    max_tokens: int
    seed: int | None


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def render_chat(messages: list[dict[str, str]]) -> str:
    """The simulator's chat template: the text that is tokenised byte by byte."""
    parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def parse_request(body: bytes, max_ctx: int) -> ChatRequest:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array of {role, content} objects")
    checked: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or message.get("role") not in _ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise BadRequest(f"messages[{i}] must be {{'role': system|user|assistant, 'content': string}}")
        checked.append({"role": message["role"], "content": message["content"]})
    if not any(m["role"] == "user" for m in checked):
        raise BadRequest("'messages' holds no user message")
    temperature = data.get("temperature", 0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature != 0:
        raise BadRequest(f"only greedy decoding is simulated: 'temperature' must be 0, got {temperature!r}")
    max_tokens = data.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not _is_int(max_tokens) or max_tokens < 1:
        raise BadRequest(f"'max_tokens' must be a positive integer, got {max_tokens!r}")
    seed = data.get("seed")
    if seed is not None and not _is_int(seed):
        raise BadRequest(f"'seed' must be an integer, got {seed!r}")
    if data.get("stream", False) is not False:
        raise BadRequest("'stream' must be false: streaming is not simulated")
    model = data.get("model", "")
    if not isinstance(model, str):
        raise BadRequest(f"'model' must be a string, got {model!r}")
    text = render_chat(checked)
    n_prompt = len(text.encode("utf-8")) + 1
    if n_prompt + max_tokens > max_ctx:
        raise BadRequest(
            f"prompt ({n_prompt} tokens) plus max_tokens ({max_tokens}) exceeds the context size "
            f"--max-ctx {max_ctx}"
        )
    return ChatRequest(model=model, prompt_text=text, max_tokens=max_tokens, seed=seed)


def error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": kind}}


def _nudge(ids: tuple[int, ...], position: int, by: int) -> tuple[int, ...]:
    changed = list(ids)
    changed[position] = (changed[position] + by) % VOCAB_SIZE
    return tuple(changed)


class Engine:
    """Per-server state (request counter, prompts seen) lives here, never in module globals."""

    def __init__(self, settings: SimSettings, log: Log) -> None:
        self._s = settings
        self._log = log
        self._target = ToyModel(bytes.fromhex(settings.target_sha256))
        self._draft = ToyModel(bytes.fromhex(settings.draft_sha256)) if settings.draft_sha256 else None
        self._lock = threading.Lock()
        self._requests = 0
        self._seen: dict[str, int] = {}

    def complete(self, request: ChatRequest) -> Answer:
        with self._lock:
            index = self._requests
            self._requests += 1
            seen = self._seen.get(request.prompt_text, 0)
            self._seen[request.prompt_text] = seen + 1
            return self._complete_locked(request, index, seen)

    def _complete_locked(self, request: ChatRequest, index: int, seen: int) -> Answer:
        s = self._s
        prompt = tokenize(request.prompt_text)
        self._log.line(
            f"slot 0: id {index} | new task, n_prompt_tokens={len(prompt.ids)} n_predict={request.max_tokens}"
        )
        if s.fault("http-error"):
            self._log.line("slot 0: error: simulated internal failure (fault http-error)")
            return Answer(500, error_body(500, "simulated internal server error", "server_error"))
        if s.fault("exit-mid-request"):
            self._log.line("GGML_ASSERT: simulated device fault while decoding (fault exit-mid-request)")
            os._exit(1)
        if s.fault("hang-request"):
            self._log.line("slot 0: decoding stalled (fault hang-request)")
            threading.Event().wait()  # never set: this request is never answered

        decoded = self._decode(prompt, request.max_tokens)
        decoded = self._apply_token_faults(decoded, index, seen)
        if s.token_delay_s > 0:
            # One sleep of exactly tokens x delay: benchmarks subtract this floor.
            time.sleep(len(decoded.ids) * s.token_delay_s)
        self._emit(decoded)
        self._log.line(f"slot 0: id {index} | stop processing: n_tokens={len(decoded.ids)} truncated=0")

        text = detokenize(decoded.ids)
        n_prompt = len(prompt.ids)
        ident = hashlib.sha256(request.prompt_text.encode("utf-8") + bytes(str(decoded.ids), "ascii"))
        body: dict[str, Any] = {
            "id": f"chatcmpl-{ident.hexdigest()[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model or s.args.target.name,
            "system_fingerprint": f"ds4ci-sim-{__version__}",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length",
                }
            ],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": len(decoded.ids),
                "total_tokens": n_prompt + len(decoded.ids),
            },
        }
        return Answer(200, body)

    def _decode(self, prompt: Prompt, max_tokens: int) -> Decoded:
        s = self._s
        if not s.spec or self._draft is None:
            return decode_target(self._target, prompt, max_tokens)
        return decode_spec(
            self._target,
            self._draft,
            prompt,
            max_tokens,
            s.q,
            # Reference-exact verification unless the approximate fused verifier is on (set or leaked).
            exact=s.reference_exact and not s.fused_verify,
            adaptive=s.adaptive_width,
            draft_always_agrees=s.fault("all-accepted"),
            capture_runner_up=s.fault("capture-token0"),
        )

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
            # Same tokens, same gen = 1 + steps + matched, but other counters than the first time.
            d = replace(d, steps=d.steps + 1, matched=d.matched - 1)
        return d

    def _emit(self, d: Decoded) -> None:
        s = self._s
        spec_view = s.spec or s.fault("target-shows-spec")
        if s.spec:
            for step in range(1, min(d.steps, 3) + 1):
                # Timing chatter that shares key names with the summary: the gate must ignore it.
                self._log.line(f"[ds4-spec-t] step={step} matched=1 offered={s.q - 1} verify_ms=0.{40 + step}")
        if s.trace:
            self._emit_trace(d.ids, spec_view)
        if not spec_view or s.fault("no-summary"):
            return
        if s.spec and s.reference_exact and not s.fault("no-banner"):
            self._log.line(banner_line(s.q))
        if not s.spec:
            # target-shows-spec: a target-only server that claims to have speculated.
            steps = max(1, len(d.ids) // 2)
            d = replace(d, steps=steps, matched=len(d.ids) - 1 - steps, offered=steps, gen=len(d.ids))
        line = self._summary(d)
        self._log.line(line)
        if s.fault("duplicate-summary"):
            self._log.line(line)
        self._log.line(f"[ds4-spec-t] total verify_ms={0.42 * max(d.steps, 1):.2f} draft_ms=0.10")

    def _emit_trace(self, ids: tuple[int, ...], speculation: bool) -> None:
        s = self._s
        reference_exact = s.reference_exact
        if s.fault("wrong-flags"):
            reference_exact, speculation = not reference_exact, not speculation
        shown: tuple[object, ...] = ids
        n = len(ids)
        if s.fault("trace-count-off"):
            n += 1
        if s.fault("empty-trace"):
            shown, n = (), 0
        if s.fault("malformed-trace") and ids:
            shown = (*ids[:-1], f"{ids[-1]}x")
        line = trace_line(reference_exact, speculation, n, shown)
        self._log.line(line)
        if s.fault("duplicate-trace"):
            self._log.line(line)

    def _summary(self, d: Decoded) -> str:
        s = self._s
        floats = s.fault("float-counters")
        return summary_line(
            gen=d.gen,
            steps=0 if s.fault("zero-steps") else d.steps,
            matched=f"{d.matched}.0" if floats else d.matched,
            offered=f"{d.offered}.0" if floats else d.offered,
            mean_accept=(d.matched, max(d.steps, 1)),
            q_cap=s.q,
            full_snap=s.reference_exact and not s.fault("no-full-snap"),
            old_format=s.fault("old-summary"),
            extra="sampling=greedy draft=toy" if s.fault("extra-summary-fields") else "",
        )
