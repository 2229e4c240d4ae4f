"""The toy target and draft models and the four ways of decoding with them.

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
- Sampled decoding (temperature or penalties: the real server's logit processing) is
  autoregressive and departs from the arg-max where a penalty or a seeded draw says so.
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
    gen: int = 0  # tokens generated after the seed token: n - 1
    speculation: bool = False  # the speculative decoder ran (it prints the summary)
    detail: tuple[StepDetail, ...] = ()  # per verify step, for the per-step and per-token lines


@dataclass(frozen=True)
class StepDetail:
    """One verify step as the real loop sees it (its per-step lines print these)."""

    position: int  # absolute position of the step's seed token
    drafts: tuple[int, ...]  # the candidates of slots 1..width-1
    targets: tuple[int, ...]  # the target's pick at slots 0..width-1
    accepted: int  # leading candidates equal to the target's picks
    emitted: tuple[int, ...]  # the tokens the step output (accepted drafts, then the target's; maybe cut)


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
    return Decoded(ids=tuple(out), gen=len(out) - 1)


@dataclass(frozen=True)
class Sampler:
    """The request's sampler fields, after the model card's defaults were applied."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def penalised(self) -> bool:
        return self.repetition_penalty > 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0

    def needs_logit_processing(self) -> bool:
        """The real server's rule: sampling or any penalty means the CPU sampler chain, which the
        greedy-only speculative verifier cannot run, so such a request decodes autoregressively."""
        return self.temperature > 0.0 or self.penalised()


REPETITION_WINDOW = 256
SAMPLE_RUNNER_UP_BELOW = 13  # a sampled position takes the runner-up for ~5% of draws (or half of near ties)


def decode_sampled(target: ToyModel, prompt: Prompt, max_tokens: int, sampler: Sampler) -> Decoded:
    """Autoregressive decoding with logit processing (token 0 comes from prefill, as greedy).

    Penalties: the arg-max is replaced by the runner-up when it already occurs among the last
    256 generated tokens. Temperature > 0 (unless top_k is 1): the runner-up is drawn for about
    half of the near ties and one position in twenty, by a hash of (seed, position), so the seed
    changes the answer and the same seed repeats it.
    """
    out = [_first_token(target, prompt, runner_up=False)]
    sampling = sampler.temperature > 0.0 and sampler.top_k != 1
    seed = sampler.seed.to_bytes(8, "little")
    while len(out) < max_tokens:
        c = target.candidates(prompt, out)
        token = c.best
        if sampler.penalised() and token in out[-REPETITION_WINDOW:]:
            token = c.runner_up
        if sampling:
            draw = hashlib.blake2b(seed + len(out).to_bytes(4, "little"), digest_size=1, key=target.key).digest()[0]
            if draw < (128 if c.near_tie else SAMPLE_RUNNER_UP_BELOW):
                token = c.runner_up if token == c.best else c.best
        out.append(token)
    return Decoded(ids=tuple(out), gen=len(out) - 1)


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
    """Speculative decoding at width q, counted the way the real decoder counts.

    Token 0 (the seed) comes from prefill; then each step verifies the seed plus up to q-1
    drafted candidates in order, keeps the agreeing candidates plus one target token (the
    correction, or a bonus when all agree), and stops emitting once max_tokens - 1 tokens
    followed the seed. ``gen`` is that number (n - 1); the last step counts in full in
    ``steps``/``matched``/``offered`` even where its output was cut. Width 1 drafts nothing.
    Adaptive width uses the real decoder's policy: at most int(ewma) + 2, where
    ewma <- 0.7 ewma + 0.3 matched, starting at 1.5.

    ``capture_runner_up`` models the bug the gate exists for: the q=1 feature-capture pass that
    produces token 0 runs a different graph and picks the runner-up token.
    """
    verify = _exact_picker(target, prompt) if exact else _approximate_picker(target, prompt)
    out = [_first_token(target, prompt, runner_up=capture_runner_up)]
    n_gen = max_tokens - 1
    steps = matched = offered = 0
    ewma = 1.5
    detail: list[StepDetail] = []
    while len(out) - 1 < n_gen:
        width = min(q, int(ewma) + 2) if adaptive else q
        drafts: list[int] = []
        for _ in range(width - 1):
            context = out + drafts
            truth = verify(context)
            drafts.append(truth if draft_always_agrees else draft.draft(prompt, context, truth))
        committed: list[int] = []
        accepted = 0
        for proposal in drafts:
            token = verify(out + committed)
            committed.append(token)
            if proposal != token:
                break  # rejected: the target's token replaces it and the rest of the step is dropped
            accepted += 1
        else:
            committed.append(verify(out + committed))  # every draft accepted (or none drafted): the bonus token
        targets = tuple(verify(out + drafts[:i]) for i in range(width))  # the batch's picks at every slot
        emitted = tuple(committed[: n_gen - (len(out) - 1)])
        detail.append(StepDetail(len(prompt.ids) + len(out) - 1, tuple(drafts), targets, accepted, emitted))
        out.extend(emitted)
        steps += 1
        matched += accepted
        offered += len(drafts)
        ewma = 0.7 * ewma + 0.3 * accepted
    return Decoded(
        ids=tuple(out), steps=steps, matched=matched, offered=offered, gen=len(out) - 1, speculation=steps > 0,
        detail=tuple(detail),
    )
