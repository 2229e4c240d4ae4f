"""The toy target and draft models and the three ways of decoding with them.

No real logits exist: for a context the target's keyed hash names the arg-max token, the
runner-up token and how close the two are (a "near tie" for about one position in ten). That is
all greedy decoding and the verifiers need, and it costs one BLAKE2b call per token, so 96 tokens
take well under a millisecond. The key is the SHA-256 of the model file, so different files give
different models and the same file always gives the same one.

- Target-only greedy decoding takes the arg-max at every position.
- Reference-exact speculation verifies each draft token sequentially against the same arg-max,
  so its tokens are the target-only tokens by construction; drafts that disagree are rejected.
- Approximate (fused) verification takes the runner-up at near ties, as a numerically different
  batched graph may, so its tokens drift away from target-only ones.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

VOCAB_SIZE = 32000
SPECIAL_TOKENS = 3  # 0 pad, 1 bos, 2 eos; byte b of the prompt is token b + 3
BOS = 1
CONTEXT_TOKENS = 4  # how many trailing tokens key the toy logits (plus the prompt digest)
NEAR_TIE_BELOW = 26  # margin byte < 26: ~10% of positions are near ties
DRAFT_AGREES_BELOW = 232  # ~91% per-token agreement: roughly the acceptance of the real runs

_PACK = struct.Struct("<I4I")


@dataclass(frozen=True)
class Candidates:
    best: int
    runner_up: int
    near_tie: bool


@dataclass(frozen=True)
class Prompt:
    ids: tuple[int, ...]
    digest: bytes  # keys every position, so the whole prompt matters, not only its tail


@dataclass(frozen=True)
class Decoded:
    ids: tuple[int, ...]
    steps: int = 0
    matched: int = 0
    offered: int = 0
    gen: int = 0  # tokens produced before truncation to max_tokens: 1 + steps + matched


def tokenize(text: str) -> Prompt:
    data = text.encode("utf-8")
    ids = (BOS, *(b + SPECIAL_TOKENS for b in data))
    return Prompt(ids=ids, digest=hashlib.blake2b(data, digest_size=16, person=b"ds4sim-prompt").digest())


_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")  # 70 syllables


def detokenize(ids: Sequence[int]) -> str:
    """A toy word per token id, so the text is a function of the ids (and never the oracle)."""
    words = []
    for token in ids:
        word = _SYLLABLES[token % 70] + _SYLLABLES[(token // 70) % 70]
        if token >= 4900:
            word += _SYLLABLES[(token // 4900) % 70]
        words.append(word)
    return " ".join(words)


@dataclass(frozen=True)
class ToyModel:
    key: bytes  # SHA-256 of the model file

    def _digest(self, prompt: Prompt, generated: Sequence[int]) -> bytes:
        payload = prompt.digest + _PACK.pack(len(generated), *_tail(prompt, generated))
        return hashlib.blake2b(payload, digest_size=16, key=self.key).digest()

    def candidates(self, prompt: Prompt, generated: Sequence[int]) -> Candidates:
        """The target's view of the next position after ``generated`` (tokens after the prompt)."""
        d = self._digest(prompt, generated)
        best = int.from_bytes(d[0:4], "little") % VOCAB_SIZE
        runner_up = int.from_bytes(d[4:8], "little") % (VOCAB_SIZE - 1)
        if runner_up >= best:
            runner_up += 1  # distinct from the arg-max
        return Candidates(best=best, runner_up=runner_up, near_tie=d[8] < NEAR_TIE_BELOW)

    def draft(self, prompt: Prompt, generated: Sequence[int], target_pick: int) -> int:
        """The draft model's proposal: the target's pick most of the time, another token otherwise."""
        d = self._digest(prompt, generated)
        if d[0] < DRAFT_AGREES_BELOW:
            return target_pick
        return (target_pick + 1 + int.from_bytes(d[1:5], "little") % (VOCAB_SIZE - 1)) % VOCAB_SIZE


def _tail(prompt: Prompt, generated: Sequence[int]) -> tuple[int, ...]:
    """The last CONTEXT_TOKENS tokens of prompt + generated, left-padded with 0; never copies the prompt."""
    tail = tuple(generated[-CONTEXT_TOKENS:])
    if len(tail) < CONTEXT_TOKENS:
        tail = tuple(prompt.ids[len(prompt.ids) - (CONTEXT_TOKENS - len(tail)) :]) + tail
    return (0,) * (CONTEXT_TOKENS - len(tail)) + tail


Picker = Callable[[Sequence[int]], int]


def _exact_picker(target: ToyModel, prompt: Prompt) -> Picker:
    def pick(generated: Sequence[int]) -> int:
        return target.candidates(prompt, generated).best

    return pick


def _approximate_picker(target: ToyModel, prompt: Prompt) -> Picker:
    def pick(generated: Sequence[int]) -> int:
        c = target.candidates(prompt, generated)
        return c.runner_up if c.near_tie else c.best

    return pick


def _first_token(target: ToyModel, prompt: Prompt, runner_up: bool) -> int:
    c = target.candidates(prompt, ())
    return c.runner_up if runner_up else c.best


def decode_target(target: ToyModel, prompt: Prompt, max_tokens: int) -> Decoded:
    """Plain greedy decoding: token 0 from prefill, then the arg-max at every position."""
    pick = _exact_picker(target, prompt)
    out = [_first_token(target, prompt, runner_up=False)]
    while len(out) < max_tokens:
        out.append(pick(out))
    return Decoded(ids=tuple(out[:max_tokens]), gen=len(out))


def decode_spec(
    target: ToyModel,
    draft: ToyModel,
    prompt: Prompt,
    max_tokens: int,
    q: int,
    *,
    exact: bool,
    adaptive: bool = False,
    draft_always_agrees: bool = False,
    capture_runner_up: bool = False,
) -> Decoded:
    """Speculative decoding at width q: each step drafts up to q-1 tokens, verifies them in order,
    keeps the agreeing prefix plus one target token (the correction, or a bonus when all agree).

    ``capture_runner_up`` models the bug the gate exists for: the q=1 feature-capture pass that
    produces token 0 runs a different graph and picks the runner-up token.
    """
    verify = _exact_picker(target, prompt) if exact else _approximate_picker(target, prompt)
    out = [_first_token(target, prompt, runner_up=capture_runner_up)]
    steps = matched = offered = 0
    width = q
    while len(out) < max_tokens:
        drafts: list[int] = []
        for _ in range(width - 1):
            context = out + drafts
            truth = verify(context)
            drafts.append(truth if draft_always_agrees else draft.draft(prompt, context, truth))
        steps += 1
        offered += len(drafts)
        accepted = 0
        for proposal in drafts:
            token = verify(out)
            out.append(token)
            if proposal != token:
                break  # rejected: the target's token replaces it and the rest of the step is dropped
            accepted += 1
        else:
            out.append(verify(out))  # every draft accepted: the bonus token
        matched += accepted
        if adaptive:
            # Adaptive width narrows after early rejections and widens again after acceptance.
            width = max(2, min(q, accepted + 2))
    return Decoded(ids=tuple(out[:max_tokens]), steps=steps, matched=matched, offered=offered, gen=len(out))
