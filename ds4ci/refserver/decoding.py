"""Greedy decoding three ways: target-only, reference-exact speculation, approximate speculation.

Every mode prefills the prompt the same way (chunks of ``--chunk`` tokens), so the arms differ
only in how tokens after the first are produced:

- target-only: one target forward per token, argmax of its logits;
- speculative step (both speculative modes): the draft proposes up to q-1 tokens one at a time;
  the target verifies ``[last, d1 .. dk]`` in ONE batched forward and the accepted prefix is the
  longest run of drafts equal to the batch's own argmax;
- reference-exact: the target's cache is then restored to the step's start and the accepted
  tokens are replayed one forward per token; the replay's own argmax is the truth (a draft the
  replay disagrees with is rejected there, and the replay's token is emitted instead), and the
  token after the last accepted draft comes from the replay too. Every emitted token is thus the
  argmax of a single-token forward over a cache built by single-token forwards: greedy's tokens;
- approximate (fused verification): the batched verification's tokens are kept, and so are the
  cache entries it wrote. In low precision a batched forward does not round like single-token
  forwards, so this can drift from greedy.

Counters of a speculative request: ``steps`` (verifications), ``offered`` (drafts offered to the
target) and ``matched`` (drafts emitted as accepted).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ds4ci.refserver.env import MAX_Q
from ds4ci.refserver.faults import FaultState, is_near_tie, stale_boundary
from ds4ci.refserver.model import argmax


@dataclass(frozen=True)
class Penalties:
    """Logit processing of the plain path (over the prompt and the tokens generated so far)."""

    frequency: float = 0.0
    presence: float = 0.0
    repetition: float = 1.0

    @property
    def neutral(self) -> bool:
        return self.frequency == 0.0 and self.presence == 0.0 and self.repetition == 1.0

    @property
    def forces_plain(self) -> bool:
        """A penalty needs logit processing, which the speculative path does not do."""
        return not self.neutral

    def apply(self, logits: torch.Tensor, context: Sequence[int]) -> torch.Tensor:
        if self.neutral:
            return logits
        counts = Counter(context)
        ids = torch.tensor(list(counts), dtype=torch.long, device=logits.device)
        seen = torch.tensor(list(counts.values()), dtype=torch.float32, device=logits.device)
        row = logits[-1].clone()
        picked = row[ids]
        if self.repetition != 1.0:
            picked = torch.where(picked > 0, picked / self.repetition, picked * self.repetition)
        row[ids] = picked - self.presence - self.frequency * seen
        return row[None]


@dataclass(frozen=True)
class StepDetail:
    """One verify step as the per-step lines show it (``position`` is the seed token's, as the loop intends)."""

    position: int
    drafts: tuple[int, ...]
    targets: tuple[int, ...]  # the target's token at slots 0..len(drafts): the replay's where it ran
    accepted: int  # drafts emitted as accepted
    emitted: tuple[int, ...]  # the tokens this step pushed (fewer than accepted + 1 only when the answer ended)


@dataclass(frozen=True)
class Counters:
    steps: int
    matched: int
    offered: int
    details: tuple[StepDetail, ...] = ()


class Cache(Protocol):
    length: int

    def snapshot(self) -> int: ...

    def crop(self, length: int) -> None: ...

    def keep_row(self, position: int) -> None: ...


class Model(Protocol):
    """What decoding needs of a model: the Llama-like ``Decoder`` or the tiny models' double."""

    arch: Any

    def new_cache(self, capacity: int) -> Any: ...

    def forward(self, tokens: Sequence[int], cache: Any, all_logits: bool = False) -> torch.Tensor: ...


class Output:
    """The generated tokens, with the stop rules (max_tokens, stop strings)."""

    def __init__(self, max_tokens: int, stop: Sequence[str], piece: Callable[[int], str]) -> None:
        self.max_tokens = max_tokens
        self.stop = tuple(s for s in stop if s)
        self.piece = piece
        self.ids: list[int] = []
        self.text = ""
        self.finish_reason = "length"
        self.done = max_tokens <= 0
        self.first_token_s: float | None = None  # time.monotonic() when the first token arrived

    def remaining(self) -> int:
        return 0 if self.done else self.max_tokens - len(self.ids)

    def push(self, token: int) -> bool:
        """Add a token; False once no more are wanted."""
        if self.done:
            return False
        if self.first_token_s is None:
            self.first_token_s = time.monotonic()
        self.ids.append(token)
        self.text += self.piece(token)
        for stop in self.stop:
            at = self.text.find(stop)
            if at >= 0:
                self.text = self.text[:at]
                self.finish_reason = "stop"
                self.done = True
                return False
        if len(self.ids) >= self.max_tokens:
            self.done = True
        return not self.done


def capacity_for(prompt_len: int, max_tokens: int) -> int:
    """Room for the answer, a last verify batch past it, and one unrestored batch (the skip-restore fault)."""
    return prompt_len + max_tokens + 2 * (MAX_Q + 1)


def _prefill(model: Model, cache: Any, prompt: Sequence[int], chunk: int) -> torch.Tensor:
    logits: torch.Tensor | None = None
    for start in range(0, len(prompt), chunk):
        logits = model.forward(prompt[start:start + chunk], cache)
    if logits is None:
        raise ValueError("the prompt holds no tokens")
    return logits


def decode_plain(model: Model, prompt: Sequence[int], out: Output, chunk: int, penalties: Penalties) -> None:
    """Target-only greedy decoding: one forward per token."""
    cache = model.new_cache(capacity_for(len(prompt), out.max_tokens))
    logits = _prefill(model, cache, prompt, chunk)
    context = list(prompt)
    while True:
        token = argmax(penalties.apply(logits, context))[-1]
        context.append(token)
        if not out.push(token):
            return
        logits = model.forward([token], cache)


class _Drafter:
    """The draft model's cache, kept in step with the sequence it has been fed."""

    def __init__(self, model: Model, capacity: int) -> None:
        self.model = model
        self.cache = model.new_cache(capacity)
        self.fed: list[int] = []

    def propose(self, context: Sequence[int], count: int, chunk: int) -> list[int]:
        common = 0
        limit = min(len(self.fed), len(context) - 1)  # the last context token is always fed anew
        while common < limit and self.fed[common] == context[common]:
            common += 1
        self.cache.crop(common)
        logits = _prefill(self.model, self.cache, context[common:], chunk)
        drafts = [argmax(logits)[-1]]
        while len(drafts) < count:
            drafts.append(argmax(self.model.forward([drafts[-1]], self.cache))[-1])
        self.fed = [*context, *drafts[:-1]]
        return drafts


def _push_all(out: Output, tokens: Sequence[int]) -> tuple[int, ...]:
    pushed = []
    for token in tokens:
        pushed.append(token)
        if not out.push(token):
            break
    return tuple(pushed)


def _replay(target: Model, cache: Any, fed: Sequence[int], targets: list[int], flipped: int | None, start: int,
            fault: FaultState | None, step: int) -> list[int]:
    """Reference-exact: restore the cache to the step's start and replay ``fed`` (the seed and the batch's
    accepted drafts) one token at a time; the replay's argmax is the truth. Returns the emitted tokens and
    writes the replay's truths into ``targets``. The planted faults act here (``refserver.faults``)."""
    width = len(targets) - 1
    boundary = stale_boundary(start, width, len(fed) - 1)
    if fault and boundary is not None and fault.ready("stale-compressor", step):
        fault.fire(step, position=boundary)
        cache.keep_row(boundary)
    if fault and fault.ready("skip-restore", step):
        fault.fire(step, position=start)
    else:
        cache.crop(start)
    emitted: list[int] = []
    truth = argmax(target.forward([fed[0]], cache))[-1]
    for slot, token in enumerate(fed[1:]):
        targets[slot] = truth
        if truth != token and slot != flipped:
            break  # the replay is the truth: this draft is rejected after all
        emitted.append(token)
        truth = argmax(target.forward([token], cache))[-1]
    targets[len(emitted)] = truth
    emitted.append(truth)
    return emitted


def decode_speculative(
    target: Model, draft: Model, prompt: Sequence[int], out: Output, chunk: int, q: int, exact: bool,
    fault: FaultState | None = None,
) -> Counters:
    """Speculative greedy decoding at width q (q-1 drafts per step); reference-exact or approximate.

    Counted like the DS4 loop: every step, the last included, offers q-1 drafts and counts its accepted
    ones in full, even where the answer's end cuts its tokens.

    ``fault`` (reference-exact only): the planted fault of ``refserver.faults``, fired at most once."""
    capacity = capacity_for(len(prompt), out.max_tokens)
    cache = target.new_cache(capacity)
    drafter = _Drafter(draft, capacity)
    first = argmax(_prefill(target, cache, prompt, chunk))[-1]
    context = [*prompt, first]  # the target's cache holds context[:-1]; context[-1] is pending
    steps = matched = offered = 0
    details: list[StepDetail] = []
    if not out.push(first):
        return Counters(steps, matched, offered)
    width = q - 1
    while not out.done:  # every step offers q-1 drafts; the last one's tokens are cut at the answer's end
        drafts = drafter.propose(context, width, chunk)
        start = cache.snapshot()
        batch = target.forward([context[-1], *drafts], cache, all_logits=True)
        verified = argmax(batch)
        accepted = 0
        flipped = None
        while accepted < width:
            if drafts[accepted] != verified[accepted]:
                if not (fault and fault.ready("near-tie", steps) and is_near_tie(batch[accepted], drafts[accepted])):
                    break
                fault.fire(steps, slot=accepted + 1, token=drafts[accepted], argmax=verified[accepted])
                flipped = accepted
            accepted += 1
        targets = list(verified)
        if exact:
            emitted = _replay(target, cache, [context[-1], *drafts[:accepted]], targets, flipped, start, fault, steps)
        else:
            cache.crop(start + accepted + 1)  # keep what the batch wrote for last, d1 .. d_accepted
            emitted = [*drafts[:accepted], verified[accepted]]
        position = len(context) - 1
        steps += 1
        offered += width
        matched += len(emitted) - 1
        pushed = _push_all(out, emitted)
        context.extend(pushed)
        details.append(StepDetail(position, tuple(drafts), tuple(targets), len(emitted) - 1, pushed))
    return Counters(steps, matched, offered, tuple(details))
