"""The chat-completions request and response, and the byte tokenizer.

The request fields the DS4 server honours are checked here (a malformed one is a 400 that names
it): messages, temperature, top_p, top_k, seed, max_tokens (clamped to 16000),
frequency_penalty, presence_penalty, repetition_penalty (alias rep_pen), stop, stream.
Decoding is greedy only, so a temperature other than 0 is refused rather than ignored.

Tokens: the prompt is rendered with a fixed chat template and its UTF-8 bytes are the token IDs
(modulo the vocabulary); a generated ID is shown as one printable ASCII character.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ds4ci import __version__
from ds4ci.refserver.decoding import Counters, Penalties

MAX_TOKENS_CLAMP = 16000
DEFAULT_MAX_TOKENS = 256
MAX_STOP_STRINGS = 16
_ROLES = ("system", "user", "assistant", "tool")


class BadRequest(ValueError):
    status = 400


@dataclass(frozen=True)
class ChatRequest:
    model: str
    prompt_text: str
    max_tokens: int
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    penalties: Penalties
    messages: tuple[tuple[str, str], ...] = ()  # (role, content) as sent: the tiny models' template reads them


def tokenize(text: str, vocab: int) -> list[int]:
    return [b % vocab for b in text.encode("utf-8")]


def piece(token: int) -> str:
    return chr(32 + token % 95)


def render_chat(messages: Sequence[tuple[str, str]]) -> str:
    return "".join(f"<|{role}|>\n{content}\n" for role, content in messages) + "<|assistant|>\n"


def _number(data: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = data.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"'{name}' must be a number, got {value!r}"[:200])
    if not low <= value <= high:
        raise BadRequest(f"'{name}' must be in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _int(data: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"'{name}' must be an integer in {low}..{high}, got {value!r}"[:200])
    return value


def _content(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise BadRequest(f"messages[{index}].content must be a string or a list of text parts")


def _messages(data: dict[str, Any]) -> list[tuple[str, str]]:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array of {role, content} objects")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise BadRequest(f"messages[{i}] must be an object with a role of {', '.join(_ROLES)}")
        out.append((str(message["role"]), _content(message, i)))
    return out


def _stop(data: dict[str, Any]) -> tuple[str, ...]:
    stop = data.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and len(stop) <= MAX_STOP_STRINGS and all(isinstance(s, str) for s in stop):
        return tuple(stop)
    raise BadRequest(f"'stop' must be a string or a list of at most {MAX_STOP_STRINGS} strings")


def _repetition(data: dict[str, Any]) -> float:
    values = {name: data[name] for name in ("repetition_penalty", "rep_pen") if data.get(name) is not None}
    if len(values) == 2 and values["repetition_penalty"] != values["rep_pen"]:
        raise BadRequest("'repetition_penalty' and its alias 'rep_pen' disagree")
    name = next(iter(values), "repetition_penalty")
    return _number({name: values.get(name)}, name, 1.0, 1e-6, 100.0)


def parse_request(body: bytes) -> ChatRequest:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    messages = _messages(data)
    temperature = _number(data, "temperature", 0.0, 0.0, 100.0)
    if temperature != 0.0:
        raise BadRequest(f"ds4ci-refserver decodes greedily only: 'temperature' must be 0, got {temperature:g}")
    _number(data, "top_p", 1.0, 0.0, 1.0)
    _int(data, "top_k", 0, 1 << 31)
    seed = _int(data, "seed", 0, (1 << 64) - 1)
    max_tokens = _int(data, "max_tokens", 1, 1 << 62)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"'stream' must be true or false, got {stream!r}"[:200])
    model = data.get("model", "")
    if not isinstance(model, str):
        raise BadRequest("'model' must be a string")
    penalties = Penalties(
        frequency=_number(data, "frequency_penalty", 0.0, -2.0, 2.0),
        presence=_number(data, "presence_penalty", 0.0, -2.0, 2.0),
        repetition=_repetition(data),
    )
    return ChatRequest(
        model=model,
        prompt_text=render_chat(messages),
        max_tokens=min(max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS, MAX_TOKENS_CLAMP),
        seed=seed,
        stop=_stop(data),
        stream=stream,
        penalties=penalties,
        messages=tuple(messages),
    )


@dataclass(frozen=True)
class Completion:
    ids: tuple[int, ...]
    text: str
    finish_reason: str
    prompt_tokens: int
    prefill_s: float
    decode_s: float
    counters: Counters | None


def _usage(c: Completion) -> dict[str, Any]:
    completion = len(c.ids)
    rate = c.counters.matched / c.counters.offered if c.counters and c.counters.offered else 0.0
    return {
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": c.prompt_tokens + completion,
        "timings": {
            "prefill_ms": round(c.prefill_s * 1000.0, 1),
            "decode_ms": round(c.decode_s * 1000.0, 1),
            "decode_tokens_per_sec": round(completion / c.decode_s, 1) if c.decode_s > 0 else 0.0,
        },
        "accept_rate": round(rate, 4),
    }


def _ident(request: ChatRequest, c: Completion) -> str:
    digest = hashlib.sha256(request.prompt_text.encode("utf-8") + " ".join(map(str, c.ids)).encode("ascii"))
    return f"chatcmpl-{digest.hexdigest()[:24]}"


def completion_body(request: ChatRequest, c: Completion, model_name: str) -> dict[str, Any]:
    return {
        "id": _ident(request, c),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model or model_name,
        "system_fingerprint": f"ds4ci-refserver-{__version__}",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason}],
        "usage": _usage(c),
    }


def stream_events(request: ChatRequest, c: Completion, model_name: str) -> list[dict[str, Any]]:
    """The same completion as ``chat.completion.chunk`` events (sent once generation has finished)."""
    base = {"id": _ident(request, c), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": request.model or model_name}
    events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    if c.text:
        events.append({**base, "choices": [{"index": 0, "delta": {"content": c.text}, "finish_reason": None}]})
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": c.finish_reason}], "usage": _usage(c)})
    return events


def error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": kind}}
