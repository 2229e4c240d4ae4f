"""Greedy decoding three ways: target-only, reference-exact speculation, approximate speculation.

Every mode prefills the prompt the same way (chunks of ``--chunk`` tokens), so the arms differ
only in how tokens after the first are produced:

- target-only: one target forward per token, argmax of its logits;
- speculative step (both speculative modes): the draft proposes up to q-1 tokens one at a time;
  the target verifies ``[last, d1 .. dk]`` and the accepted prefix is the longest run of drafts
  equal to the verify's own argmax; the token after it (the bonus) is the verify's too;
- reference-exact, as the DS4 engine's reference-exact loop does it: the verify runs one
  single-token forward per token, after a snapshot of the target's cache; where a draft was
  rejected, the snapshot is restored and the seed and the accepted drafts are replayed one forward
  per token, so the cache holds exactly the committed tokens (the replay's argmax is not used).
  Every emitted token is thus the argmax of a single-token forward over a cache built by
  single-token forwards: greedy's tokens;
- approximate (fused verification): the verify is ONE batched forward, its tokens are kept, and so
  are the cache entries it wrote below the commit. In low precision a batched forward does not
  round like single-token forwards, so this can drift from greedy.

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

from ds4ci.refserver import faults
from ds4ci.refserver.env import MAX_Q
from ds4ci.refserver.faults import ENGINE_MUTANTS, FaultState, is_near_tie, stale_boundary
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
    targets: tuple[int, ...]  # the verify's argmax at slots 0..len(drafts)
    accepted: int  # drafts emitted as accepted
    emitted: tuple[int, ...]  # the tokens this step pushed (fewer than accepted + 1 only when the answer ended)


@dataclass(frozen=True)
class Counters:
    steps: int
    matched: int
    offered: int
    details: tuple[StepDetail, ...] = ()


class Cache(Protocol):
    """A target's cache (``model.KVCache`` or the tiny models' ``enginecache.EngineCache``); ``length`` is
    where the next forward writes."""

    length: int

    def snapshot(self) -> Any: ...

    def restore(self, snapshot: Any) -> None: ...

    def truncate(self, snapshot: Any, commit: int) -> None: ...

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


def _verify(target: Model, cache: Any, tokens: Sequence[int], sequential: bool) -> torch.Tensor:
    """The verify forward: one token at a time (the engine's reference-exact verify) or one batch."""
    if not sequential:
        return target.forward(tokens, cache, all_logits=True)
    return torch.cat([target.forward([token], cache) for token in tokens])


def _accept(batch: torch.Tensor, verified: list[int], drafts: Sequence[int], fault: FaultState | None,
            step: int) -> int:
    """The accepted drafts: the longest run equal to the verify's own argmax (the faults act here)."""
    accepted = 0
    while accepted < len(drafts):
        if drafts[accepted] != verified[accepted]:
            if fault and fault.ready("near-tie", step) and is_near_tie(batch[accepted], drafts[accepted]):
                fault.fire(step, slot=accepted + 1, token=drafts[accepted], argmax=verified[accepted])
            else:
                if fault and fault.acts("accept-off-by-one", step):
                    accepted += 1  # the rejected draft counted too
                break
        accepted += 1
    return accepted


def _bonus(verified: list[int], accepted: int, fault: FaultState | None, step: int) -> int:
    width = len(verified) - 1
    if accepted < width and fault and fault.acts("bonus-wrong-slot", step):
        return verified[accepted + 1]  # the target's token after the rejected draft
    return verified[accepted]


def _rollback_skipped(accepted: int, width: int, fault: FaultState | None, step: int) -> bool:
    """Whether the planted mutant skips this rejection's rollback: the cache keeps the verify's writes, rejected
    drafts' included (the engine's accept counts the seed: ``accepted + 1``)."""
    if fault is None:
        return False
    name = fault.plan.name
    if name == "last-slot-not-rolled-back":  # only the last draft was rejected
        return accepted == width - 1 and fault.acts(name, step)
    if name in faults.ROLLBACK_SKIPPED_AT:
        return accepted + 1 == faults.ROLLBACK_SKIPPED_AT[name] and fault.acts(name, step)
    return fault.acts("no-rollback", step)


def _restore(cache: Any, snapshot: Any, fault: FaultState | None, step: int) -> None:
    """The snapshot restore, less what the planted mutant leaves out (``faults.RESTORE_SKIPS``)."""
    name = fault.plan.name if fault else ""
    if fault and name in faults.RESTORE_SKIPS and fault.acts(name, step):
        parts, layer = faults.RESTORE_SKIPS[name]
        cache.restore(snapshot, parts, layer)
        return
    if fault and name in faults.RESTORE_NOOPS:
        fault.acts(name, step)  # the double's restore holds no such state to leave out
    cache.restore(snapshot)


def _rollback(target: Model, cache: Any, snapshot: Any, fed: Sequence[int], accepted: int, start: int,
              sequential: bool, fault: FaultState | None, step: int) -> None:
    """Reference-exact, after the verify of ``fed`` (the seed and the drafts) from ``start``: where a draft was
    rejected, restore the snapshot and replay the seed and the accepted drafts from ``start``, so that the cache
    holds exactly the committed tokens; the replay's own argmax is not used (the verify's is the truth). The
    planted faults act here (``refserver.faults``)."""
    width = len(fed) - 1
    commit = start + accepted + 1
    if accepted >= width:
        return  # every draft accepted: the cache holds the committed tokens already
    if _rollback_skipped(accepted, width, fault, step):
        cache.seek(commit)
        return
    boundary = stale_boundary(start, width, accepted)
    if fault and boundary is not None and fault.ready("stale-compressor", step):
        fault.fire(step, position=boundary)
        cache.keep_row(boundary)
    if fault and fault.ready("skip-restore", step):
        fault.fire(step, position=start)
        _verify(target, cache, fed[:accepted + 1], sequential)  # appended after what the verify wrote
        return
    _restore(cache, snapshot, fault, step)
    if fault and fault.acts("restore-without-replay", step):
        cache.seek(commit)
        return
    replay, at = fed[:accepted + 1], start
    if fault and fault.acts("replay-off-by-one", step):
        replay = fed[1:accepted + 2]  # the accepted drafts and the rejected one, without the seed
    if fault and fault.acts("replay-wrong-position", step):
        at = start + 1
    if accepted and fault and fault.acts("replay-drops-last-accepted", step):
        replay = fed[:accepted]  # the last accepted draft's position keeps the restored snapshot's rows
    if cache.length != at:
        cache.seek(at)
    _verify(target, cache, replay, sequential)
    if cache.length != commit:
        cache.seek(commit)


def decode_speculative(
    target: Model, draft: Model, prompt: Sequence[int], out: Output, chunk: int, q: int, exact: bool,
    fault: FaultState | None = None,
) -> Counters:
    """Speculative greedy decoding at width q (q-1 drafts per step); reference-exact or approximate.

    Counted like the DS4 loop: every step, the last included, offers q-1 drafts and counts its accepted
    ones in full, even where the answer's end cuts its tokens.

    ``fault`` (reference-exact only): the planted fault of ``refserver.faults``; a seeded one fires at most
    once, an engine mutant acts at every step (it needs the tiny models' double: an engine-shaped cache)."""
    capacity = capacity_for(len(prompt), out.max_tokens)
    cache = target.new_cache(capacity)
    if fault and fault.plan.name in ENGINE_MUTANTS and not hasattr(cache, "seek"):
        raise ValueError(f"the engine mutant {fault.plan.name} needs the tiny models' double (an engine-shaped cache)")
    drafter = _Drafter(draft, capacity)
    first = argmax(_prefill(target, cache, prompt, chunk))[-1]
    context = [*prompt, first]  # the target's cache holds context[:-1]; context[-1] is pending
    steps = matched = offered = 0
    details: list[StepDetail] = []
    if not out.push(first):
        return Counters(steps, matched, offered)
    width = q - 1
    kept = None  # the stale-snapshot mutant's first snapshot
    while not out.done:  # every step offers q-1 drafts; the last one's tokens are cut at the answer's end
        drafts = drafter.propose(context, width, chunk)
        if fault:
            fault.acts("draft-context-frozen", steps)  # the double's draft reads no features to freeze
        start = cache.length
        sequential = exact and not (fault and fault.acts("batched-verify", steps))
        after = bool(fault and fault.acts("snapshot-after-verify", steps))
        snapshot = None if after else cache.snapshot()
        if fault and fault.acts("stale-snapshot", steps):
            kept = snapshot if kept is None else kept
            snapshot = kept
        fed = [context[-1], *drafts]
        batch = _verify(target, cache, fed, sequential)
        if after:
            snapshot = cache.snapshot()
        verified = argmax(batch)
        accepted = _accept(batch, verified, drafts, fault, steps)
        if exact:
            bonus = _bonus(verified, accepted, fault, steps)
            _rollback(target, cache, snapshot, fed, accepted, start, sequential, fault, steps)
        else:
            bonus = verified[accepted]
            cache.truncate(snapshot, start + accepted + 1)  # keep what the batch wrote for last, d1 .. d_accepted
        emitted = [*fed[1:accepted + 1], bonus]
        position = len(context) - 1
        steps += 1
        offered += width
        matched += len(emitted) - 1
        pushed = _push_all(out, emitted)
        context.extend(pushed)
        details.append(StepDetail(position, tuple(drafts), tuple(verified), len(emitted) - 1, pushed))
    return Counters(steps, matched, offered, tuple(details))
