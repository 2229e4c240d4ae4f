"""A double of the DS4 tiny models (``ds4ci tiny-models``, both kinds) for the reference server.

The reference server cannot run a DS4 graph; this double serves what the tiny models' files
decide on their own, read with the ``gguf`` package (Q8_0 dequantized by ``gguf.quants``), and
stands in for the rest with a small, documented term:

- reproduced from the target file, the **direct path**: the next-token logits after token ``t``
  are the tied output head applied to the final norm of ``t``'s embedding,
  ``output . rms_norm(token_embd[t])`` (what ``tinymodels.structure.output_rows`` builds for the
  successor kind; the same formula over the random kind's random tensors);
- reproduced from the draft file, the **DSpark Markov head**: ``bias_j(prev) = w2[j] . w1[prev]``,
  added to the draft's own logits, argmax, chained for the q-1 drafts;
- stood in for, the **layers** (target) and the draft's own logits. The target adds a
  cache-dependent context term: every position writes a row (a fixed random vector of its token),
  every ratio-4 block's last position (``p % 4 == 3``) writes a "compressor row" (the mean of the
  block's four rows), and the logits at ``p`` get ``CONTEXT_GAIN x std(blk.0.attn_output_b)``
  times a random projection of the recency-weighted rows before ``p`` and compressor rows so far
  (about 0.4 logits for the successor kind, 4 for the random kind: the layers' output projections
  are 0.005 and 0.05 wide). So what the cache holds, whether it is restored and whether a
  compressor row is recomputed matter, as in the real server, but only where the direct path is
  close (the successor kind's near-ties). The draft's own logits are the output head over the
  final norm of ``dflash.fc`` applied to the token's embedding twice (standing in for the two
  captured layers' features, which the layers barely change).

All arithmetic is float64 numpy, so a batched forward equals single-token forwards exactly: this
double has no rounding of its own for an approximate verifier to expose; it exercises the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ds4ci.judging.tinywords import word
from ds4ci.refserver.model import AppendOnly
from ds4ci.tinymodels.vocab import N_BYTES, SPECIALS

TARGET_ARCH = "deepseek4"
CONTEXT_DIM = 64
CONTEXT_GAIN = 80.0  # logits of the context term per unit of the layers' output-projection std
DECAY = 0.7  # recency weight of a row (per position) and of a compressor row (per block)
RECENT_ROWS = 32  # rows before p that count (0.7**32 < 1e-4)
RECENT_BLOCKS = 8  # compressor rows that count
RATIO = 4


class TinyModelError(ValueError):
    """A GGUF file that is not one of the tiny models this double serves."""


def _tensors(path: Path, names: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError) as exc:
        raise TinyModelError(f"{path}: not a readable GGUF file ({exc})") from None
    found = {t.name: t for t in reader.tensors}
    missing = [n for n in names if n not in found]
    if missing:
        raise TinyModelError(f"{path}: missing tensor(s) {', '.join(missing)}; expected a `ds4ci tiny-models` file")
    out = {n: np.asarray(gguf.quants.dequantize(found[n].data, found[n].tensor_type), dtype=np.float64) for n in names}
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("general.")}
    return out, fields


def _rms(x: np.ndarray) -> np.ndarray:
    normed: np.ndarray = x / np.sqrt((x * x).mean(axis=-1, keepdims=True))
    return normed


@dataclass(frozen=True)
class TinyArch:
    vocab: int
    n_embd: int
    name: str
    context_logits: float

    def describe(self) -> str:
        return (f"tiny-model double of {self.name}: vocab={self.vocab} n_embd={self.n_embd} direct path from the file, "
                f"context term {self.context_logits:.2f} logits standing in for the layers")


class TinyCache(AppendOnly):
    """Rows per position and compressor rows per ratio-4 block; a snapshot is the length."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.rows = np.zeros((capacity, CONTEXT_DIM))
        self.compressed: dict[int, np.ndarray] = {}
        self.sticky: set[int] = set()  # blocks whose compressor row is never recomputed (the stale-compressor fault)

    def crop(self, length: int) -> None:
        super().crop(length)
        for block in [b for b in self.compressed if RATIO * b + RATIO - 1 >= length and b not in self.sticky]:
            del self.compressed[block]

    def keep_row(self, position: int) -> None:
        self.sticky.add(position // RATIO)


class TinyTarget:
    def __init__(self, path: Path, sha256: str) -> None:
        names = ["token_embd.weight", "output.weight", "blk.0.attn_output_b.weight"]
        t, fields = _tensors(path, names)
        emb, out = t["token_embd.weight"], t["output.weight"]
        name = str(fields.get("general.name", ""))
        if not name.startswith("ds4ci-tiny-"):
            raise TinyModelError(f"{path}: general.name {name!r} is not a `ds4ci tiny-models` target")
        self.direct: np.ndarray = _rms(emb) @ out.T  # [prev, next]
        self.embedding = emb
        self.head = out
        scale = CONTEXT_GAIN * float(t["blk.0.attn_output_b.weight"].std())
        self.arch = TinyArch(emb.shape[0], emb.shape[1], name, scale)
        rng = np.random.default_rng(int.from_bytes(bytes.fromhex(sha256)[:8], "little"))
        self.token_rows = rng.standard_normal((emb.shape[0], CONTEXT_DIM))
        self.projection = rng.standard_normal((emb.shape[0], CONTEXT_DIM)) * (scale / np.sqrt(CONTEXT_DIM))
        weights = DECAY ** np.arange(1, RECENT_ROWS + 1)
        self._row_weights = weights
        self._norm = float(np.sqrt((weights ** 2).sum() + (DECAY ** (2 * np.arange(RECENT_BLOCKS))).sum()))

    def new_cache(self, capacity: int) -> TinyCache:
        return TinyCache(capacity)

    def context(self, cache: TinyCache, p: int) -> np.ndarray:
        """The context vector at position p: rows before p (recency-weighted) and the compressor rows so far."""
        low = max(0, p - RECENT_ROWS)
        before = cache.rows[low:p][::-1]
        c = (self._row_weights[: len(before), None] * before).sum(axis=0)
        done = sorted((b for b in cache.compressed if RATIO * b + RATIO - 1 <= p), reverse=True)[:RECENT_BLOCKS]
        for age, block in enumerate(done):
            c = c + DECAY ** age * cache.compressed[block]
        vector: np.ndarray = c / self._norm
        return vector

    def logits_at(self, cache: TinyCache, token: int, p: int) -> np.ndarray:
        row: np.ndarray = self.direct[token] + self.projection @ self.context(cache, p)
        return row

    def forward(self, tokens: Sequence[int], cache: TinyCache, all_logits: bool = False) -> torch.Tensor:
        if not tokens:
            raise ValueError("forward needs at least one token")
        if cache.length + len(tokens) > cache.capacity:
            raise ValueError(f"{cache.length} + {len(tokens)} tokens exceed the cache capacity {cache.capacity}")
        rows = []
        for index, token in enumerate(tokens):
            p = cache.length
            cache.rows[p] = self.token_rows[token]
            block = p // RATIO
            if p % RATIO == RATIO - 1 and block not in cache.sticky:
                cache.compressed[block] = cache.rows[p - RATIO + 1:p + 1].mean(axis=0)
            cache.length = p + 1
            if all_logits or index == len(tokens) - 1:
                rows.append(self.logits_at(cache, token, p))
        return torch.tensor(np.stack(rows), dtype=torch.float32)


class _NoCache(AppendOnly):
    """The draft's: it only counts what it was fed."""

    def keep_row(self, position: int) -> None:  # the draft keeps no rows
        del position


class TinyDraft:
    """The DSpark draft: its own logits (the stand-in above) plus the Markov head's bias, context-free."""

    def __init__(self, path: Path, target: TinyTarget) -> None:
        names = ["dflash.fc.weight", "dflash.dspark.markov.w1", "dflash.dspark.markov.w2"]
        t, fields = _tensors(path, names)
        name = str(fields.get("general.name", ""))
        if name != f"{target.arch.name}-dspark":
            raise TinyModelError(f"{path}: general.name {name!r} is not the draft of {target.arch.name!r}")
        emb = target.embedding
        features = np.concatenate([emb, emb], axis=1)  # the two captured layers' features
        own = _rms(features @ t["dflash.fc.weight"].T) @ target.head.T
        markov = t["dflash.dspark.markov.w1"] @ t["dflash.dspark.markov.w2"].T  # [prev, j]
        self.logits = torch.tensor(own + markov, dtype=torch.float32)
        self.arch = target.arch

    def new_cache(self, capacity: int) -> _NoCache:
        return _NoCache(capacity)

    def forward(self, tokens: Sequence[int], cache: _NoCache, all_logits: bool = False) -> torch.Tensor:
        cache.length += len(tokens)
        rows = self.logits[list(tokens)]
        return rows if all_logits else rows[-1:]


def chat_tokens(messages: Sequence[tuple[str, str]]) -> list[int]:
    """The DS4 chat template over the tiny vocabulary: BOS, then each turn (User/Assistant marker, its UTF-8
    bytes), then Assistant and ``</think>`` (greedy decoding without thinking)."""
    special = {s: N_BYTES + i for i, s in enumerate(SPECIALS)}
    ids = [special[SPECIALS[0]]]
    for role, content in messages:
        if role == "user":
            ids.append(special["<｜User｜>"])
        elif role == "assistant":
            ids.append(special["<｜Assistant｜>"])
        ids.extend(content.encode("utf-8"))
    return [*ids, special["<｜Assistant｜>"], special["</think>"]]


def tiny_piece(token: int) -> str:
    first_word = N_BYTES + len(SPECIALS)
    if token >= first_word:
        return word(token)
    if token >= N_BYTES:
        return SPECIALS[token - N_BYTES]
    return chr(token) if token < 128 else "\ufffd"
