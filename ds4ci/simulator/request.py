"""One chat-completion request: its fields, checked, with the model card's defaults applied.

Honoured like the real server: ``messages``, ``temperature``, ``top_p``, ``top_k``, ``seed``
(an unsigned 64-bit integer), ``max_tokens`` (also ``max_output_tokens`` and
``max_completion_tokens``; clamped to 16000), ``frequency_penalty``, ``presence_penalty``,
``repetition_penalty`` (alias ``rep_pen``), ``stop`` and ``stream``. A sampler field that is
left out takes the model card's value, else the neutral one (greedy, no penalty); the card has
no frequency penalty, so that one defaults to 0 always. A malformed request is a 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ds4ci.errors import ProtocolError
from ds4ci.simulator.card import ModelCard
from ds4ci.simulator.model import Sampler

DEFAULT_MAX_TOKENS = 16000  # the real server's --default-max-tokens: also the ceiling
_ROLES = ("system", "user", "assistant")
_UINT64 = 1 << 64


class BadRequest(ProtocolError):
    """The client's request does not have the documented shape (HTTP 400)."""

    status = 400


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: int
    prompt_text: str
    max_tokens: int
    requested_max_tokens: int  # before the clamp
    sampler: Sampler
    stop: tuple[str, ...]
    stream: bool


def render_chat(messages: list[dict[str, str]]) -> str:
    """The simulator's chat template: the text that is tokenised byte by byte."""
    parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def prompt_tokens(text: str) -> int:
    return len(text.encode("utf-8")) + 1  # BOS + one token per byte


def context_overflow(max_ctx: int, n_prompt: int, max_tokens: int) -> str:
    return (
        f"This model's maximum context length is {max_ctx} tokens. However, you requested "
        f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion). "
        "Please reduce the length of the messages or completion."
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"JSON parse error: '{key}' must be a number, got {value!r}")
    return float(value)


def _first_present(data: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if k in data), None)


def _messages(data: dict[str, Any]) -> list[dict[str, str]]:
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
    return checked


def _sampler(data: dict[str, Any], card: ModelCard) -> Sampler:
    top_k = data.get("top_k", card.top_k if card.top_k is not None else 0)
    if not _is_int(top_k):
        raise BadRequest(f"JSON parse error: 'top_k' must be an integer, got {top_k!r}")
    seed = data.get("seed", 0)
    if not _is_int(seed):
        raise BadRequest(f"JSON parse error: 'seed' must be an unsigned 64-bit integer, got {seed!r}")
    rep_key = _first_present(data, ("repetition_penalty", "rep_pen"))
    rep_default = card.repetition_penalty if card.repetition_penalty is not None else 1.0
    return Sampler(
        temperature=_number(data, "temperature", card.temperature if card.temperature is not None else 0.0),
        top_p=_number(data, "top_p", card.top_p if card.top_p is not None else 1.0),
        top_k=top_k,
        seed=seed % _UINT64,  # the real conversion wraps a negative integer
        frequency_penalty=_number(data, "frequency_penalty", 0.0),
        presence_penalty=_number(
            data, "presence_penalty", card.presence_penalty if card.presence_penalty is not None else 0.0
        ),
        repetition_penalty=rep_default if rep_key is None else _number(data, rep_key, rep_default),
    )


def _stop(data: dict[str, Any]) -> tuple[str, ...]:
    stop = data.get("stop")
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list):
        return tuple(s for s in stop if isinstance(s, str) and s)
    return ()


def parse_request(body: bytes, max_ctx: int, card: ModelCard) -> ChatRequest:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"JSON parse error: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("JSON parse error: the request body must be a JSON object")
    checked = _messages(data)
    key = _first_present(data, ("max_tokens", "max_output_tokens", "max_completion_tokens"))
    requested = data[key] if key is not None else DEFAULT_MAX_TOKENS
    if not _is_int(requested) or requested < 1:
        raise BadRequest(f"'{key}' must be a positive integer, got {requested!r}")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"JSON parse error: 'stream' must be a boolean, got {stream!r}")
    model = data.get("model", "")
    if not isinstance(model, str):
        raise BadRequest(f"JSON parse error: 'model' must be a string, got {model!r}")
    max_tokens = min(requested, DEFAULT_MAX_TOKENS)
    sampler = _sampler(data, card)
    text = render_chat(checked)
    n_prompt = prompt_tokens(text)
    if n_prompt + max_tokens > max_ctx:
        raise BadRequest(context_overflow(max_ctx, n_prompt, max_tokens))
    return ChatRequest(
        model=model,
        messages=len(checked),
        prompt_text=text,
        max_tokens=max_tokens,
        requested_max_tokens=requested,
        sampler=sampler,
        stop=_stop(data),
        stream=stream,
    )
