"""The successor structure of the tiny models: what the target continues with and what the draft guesses.

The word tokens form one long cycle (a seeded permutation): ``succ(t)`` is the word after ``t``.
The target implements it through its embedding and tied output head alone: the output row of a
word ``j`` is the unit embedding direction of the token(s) before it, scaled to ``ALPHA`` logits,
plus ``BETA`` logits toward the token two before it, so that for any token ``t`` the logits are
about ``ALPHA`` for ``succ(t)``, ``BETA`` for ``succ(succ(t))`` and near zero elsewhere. Every
byte and special token a prompt can end with has a successor word too (the chat template's
endings ``<think>`` and ``</think>`` the cycle's first word), so the first generated token is fixed
by the prompt's last token. The layers write back into the residual stream only
through small output projections (``design.Design.layer_out_std``): they run, but outvote the direct path only at
near-ties.
Near-ties (``NEAR_TIES``) put the skip only 0.1 logits behind the successor, so the layers, which
read the cache, decide it; a cache that a rollback left wrong then changes the answer
(docs/benchmarks.md, section 9, measured it). Every word the draft does not know is one (there the
draft guesses the skip, so it is right whenever the layers take it), and about one known word in
three: half the words, with acceptance still in its band. The first block of runs, where every
answer starts and whose steps a build prints, has none, so those steps show every accept length
whatever the layers decide. Either way it is a step
forward on the cycle. Any greedy continuation is therefore a forward walk of steps 1 or 2 on a
cycle of ``n_vocab - first_word`` words: no ID repeats within it.

The DSpark draft's Markov head (rank ``markov_rank``, a bilinear bigram bias added to the draft's
logits) knows ``succ`` only for a seeded subset of words ("known"); for the others it guesses
``succ(succ(t))``. Known words come in runs of 0 to 5 along the cycle, so accept lengths
spread over 0..q-1 at every width. This module computes the arrays and the intended behaviour;
``target``/``draft`` write them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 16.0  # logits of the successor
BETA = 8.0  # logits of the token after the successor (the runner-up)


@dataclass(frozen=True)
class NearTies:
    gap: float  # at near-tie words the runner-up is this many logits behind the successor
    every: int  # about one word the draft's Markov head knows in this many is a near-tie
    unknown_every: int  # and about one word it does not know in this many
    in_first_block: bool  # whether the first block of runs (FIRST_RUNS, where every answer starts) has any

    def share(self, known: bool) -> float:
        return 1.0 / (self.every if known else self.unknown_every)


NEAR_TIES = NearTies(0.1, 3, 1, False)  # what `ds4ci tiny-models` writes (the third set, since 2026-12-02)
# The successor models of the first 2026-12-02 H200 capture: one word in six a near-tie, known or not; the
# layers decided them, but a stale compressor row rarely reached one (docs/benchmarks.md, section 9).
SECOND_NEAR_TIES = NearTies(0.1, 6, 6, True)
# The first successor models (2026-12-01, the first H200 captures): near-ties the layers never decided.
FIRST_NEAR_TIES = NearTies(1.0, 16, 16, True)
MARKOV_LOGITS = 40.0  # the Markov head's bias toward its guess
# Known words come in runs, each followed by one unknown word; the run lengths come in blocks (a
# seeded order of RUN_BLOCK each), so every stretch of 96 tokens holds every length several times.
RUN_BLOCK = (0, 0, 1, 2, 3, 4, 5)
# The first block, where every answer starts (the chat template's endings lead to the cycle's
# first word): accept lengths 3, 0, 1, 2 at q=4 (2, 0, 0, 1, 2 at q=3) in the first steps,
# which are the steps a build's compare lines show.
FIRST_RUNS = (3, 0, 1, 2, 5, 0, 4)
FIRST_BLOCK = sum(run + 1 for run in FIRST_RUNS)  # the words of the first block (each run and its unknown word)


@dataclass(frozen=True)
class Structure:
    first_word: int
    n_vocab: int
    cycle: tuple[int, ...]  # the word tokens in cycle order
    succ: dict[int, int]  # every token a continuation can start from -> the word after it
    known: frozenset[int]  # words whose successor the draft's Markov head knows
    near_ties: frozenset[int]  # words whose runner-up is only ``near_tie_gap`` behind
    near_tie_gap: float

    def guess(self, token: int) -> int:
        """The draft's Markov guess after ``token``: its successor where known, else the one after."""
        nxt = self.succ[token]
        return nxt if token in self.known else self.succ[nxt]


def build(n_vocab: int, first_word: int, no_successor: Sequence[int], endings: Sequence[int],
          rng: np.random.Generator, near_ties: NearTies = NEAR_TIES) -> Structure:
    """``no_successor``: tokens no answer follows (the mask); ``endings``: the tokens a chat prompt
    ends with, whose successor is the cycle's first word."""
    words = [int(w) for w in rng.permutation(np.arange(first_word, n_vocab))]
    n = len(words)
    if n < 3:
        raise ValueError(f"{n} word tokens cannot form a cycle with a successor and a skip")
    succ = {words[i]: words[(i + 1) % n] for i in range(n)}
    for tok in range(first_word):
        if tok not in no_successor:
            succ[tok] = words[0] if tok in endings else words[int(rng.integers(n))]
    known: set[int] = set()
    i = 0
    blocks = 0
    while i < n:
        for run in FIRST_RUNS if blocks == 0 else rng.permutation(RUN_BLOCK):
            known.update(words[i:i + int(run)])
            i += int(run) + 1
        blocks += 1
    first_block = 0 if near_ties.in_first_block else FIRST_BLOCK
    # one draw per word, whatever the set, so that every set draws the same numbers
    near = {w for i, w in enumerate(words) if rng.random() < near_ties.share(w in known) and i >= first_block}
    return Structure(first_word, n_vocab, tuple(words), succ, frozenset(known), frozenset(near), near_ties.gap)


def _unit_rows(e: np.ndarray) -> np.ndarray:
    rows: np.ndarray = e / np.linalg.norm(e, axis=1, keepdims=True)
    return rows


def output_rows(st: Structure, embedding: np.ndarray) -> np.ndarray:
    """The tied output head (numpy [n_vocab, n_embd]) for the embedding ``embedding`` ([n_vocab, n_embd]).

    The last norm hands the head ``sqrt(n_embd) * unit(x)``, so a row ``c * unit(e_t) / sqrt(n_embd)``
    gives token ``t``'s hidden state ``c`` logits.
    """
    n_embd = embedding.shape[1]
    unit = _unit_rows(embedding.astype(np.float32)) / np.float32(np.sqrt(n_embd))
    out: np.ndarray = np.zeros_like(unit)
    for tok, nxt in st.succ.items():
        out[nxt] += ALPHA * unit[tok]
        if tok >= st.first_word:
            after = st.succ[nxt]
            out[after] += (ALPHA - st.near_tie_gap if tok in st.near_ties else BETA) * unit[tok]
    return out


def markov_rows(st: Structure, rank: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Markov w1 and w2 (numpy [n_vocab, rank] each): bias_j(prev) = w2[j] . w1[prev] = MARKOV_LOGITS for the guess."""
    keys = _unit_rows(rng.standard_normal((st.n_vocab, rank)).astype(np.float32))
    keys[: st.first_word] = 0.0  # never guess a byte or special token
    w1 = np.zeros((st.n_vocab, rank), dtype=np.float32)
    for tok in st.succ:
        w1[tok] = MARKOV_LOGITS * keys[st.guess(tok)]
    return w1, keys


def greedy_walk(next_of: dict[int, int], start: int, n_tokens: int) -> list[int]:
    """The first ``n_tokens`` generated tokens after a prompt ending in ``start``."""
    out: list[int] = []
    tok = start
    while len(out) < n_tokens:
        tok = next_of[tok]
        out.append(tok)
    return out


@dataclass(frozen=True)
class SpecRun:
    width: int
    matched: int
    offered: int
    accept_lengths: tuple[int, ...]  # per verify step, drafts accepted


def speculate(answer: Sequence[int], guess: dict[int, int], width: int) -> SpecRun:
    """The reference-exact loop over a known greedy ``answer``: drafts chained from ``guess``, the
    target's tokens from ``answer``; the first token comes from the prompt, each step commits its
    accepted drafts plus one target token, until ``len(answer)`` tokens are out."""
    n = len(answer)
    done, matched, offered, lengths = 1, 0, 0, []
    while done < n:
        drafts: list[int] = []
        tok = answer[done - 1]
        for _ in range(width - 1):
            tok = guess[tok]
            drafts.append(tok)
        accepted = 0
        while accepted < len(drafts) and done + accepted < n and drafts[accepted] == answer[done + accepted]:
            accepted += 1
        matched += accepted
        offered += len(drafts)
        lengths.append(accepted)
        done += accepted + 1
    return SpecRun(width, matched, offered, tuple(lengths))


def shortest_cycle(seq: Sequence[int]) -> int | None:
    """The shortest period p such that some token recurs p positions later (None: no ID repeats)."""
    last: dict[int, int] = {}
    best: int | None = None
    for i, tok in enumerate(seq):
        if tok in last:
            gap = i - last[tok]
            best = gap if best is None else min(best, gap)
        last[tok] = i
    return best
