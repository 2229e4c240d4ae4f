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
  cache-dependent context term read from an engine-shaped cache (``enginecache``: per layer of the
  file's ``attention.compress_ratios``, a raw ring of its ``attention.sliding_window`` rows and, in
  the layers of ratio 4 and 128, a compressor and its visible-row count, as the DS4 engine keeps
  them): every position writes a row (a fixed random vector of its token) into every layer's ring
  and compressor, and the logits at ``p`` get ``CONTEXT_GAIN x std(blk.0.attn_output_b)`` times a
  random projection of what a query at ``p`` reads there: the ring rows, weighted by ``DECAY`` per
  position behind ``p`` that each stands for (``p``'s own row left out: it is a function of the
  token, which the direct path already is) and averaged over the layers (so one layer's ring weighs
  1/layers: the double's layers are not chained), and each compressor layer's visible compressed
  rows, ``DECAY`` per row from the newest (1.2 logits for the
  shipped successor set, whose layers write at 0.015; 0.4 for the earlier sets at 0.005; 4 for the
  random kind at 0.05). So what the cache holds, and whether a rollback restores it, matter as in
  the real engine, but only where the direct path is close (the successor kind's near-ties). The
  draft's own logits are the output head over the final norm of ``dflash.fc`` applied to the
  token's embedding twice (standing in for the two captured layers' features, which the layers
  barely change).

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
from ds4ci.refserver.enginecache import RATIOS, EngineCache
from ds4ci.refserver.model import AppendOnly
from ds4ci.tinymodels.vocab import N_BYTES, SPECIALS

TARGET_ARCH = "deepseek4"
SLIDING_WINDOW = f"{TARGET_ARCH}.attention.sliding_window"
COMPRESS_RATIOS = f"{TARGET_ARCH}.attention.compress_ratios"
CONTEXT_DIM = 64
CONTEXT_GAIN = 80.0  # logits of the context term per unit of the layers' output-projection std
DECAY = 0.7  # recency weight of a ring row (per position) and of a compressed row (per row)
RECENT_ROWS = 32  # ring rows behind p that count (0.7**32 < 1e-4), within the window
RECENT_BLOCKS = 8  # compressed rows of each ratio that count


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
    wanted = (SLIDING_WINDOW, COMPRESS_RATIOS)
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("general.") or k in wanted}
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
    n_swa: int
    compress_ratios: tuple[int, ...]

    def describe(self) -> str:
        return (f"tiny-model double of {self.name}: vocab={self.vocab} n_embd={self.n_embd} direct path from the file, "
                f"context term {self.context_logits:.2f} logits standing in for the layers, read from an engine-shaped "
                f"cache of {len(self.compress_ratios)} layers (compress ratios {list(self.compress_ratios)}, raw rings of "
                f"{self.n_swa} rows)")


class TinyTarget:
    def __init__(self, path: Path, sha256: str) -> None:
        names = ["token_embd.weight", "output.weight", "blk.0.attn_output_b.weight"]
        t, fields = _tensors(path, names)
        emb, out = t["token_embd.weight"], t["output.weight"]
        name = str(fields.get("general.name", ""))
        if not name.startswith("ds4ci-tiny-"):
            raise TinyModelError(f"{path}: general.name {name!r} is not a `ds4ci tiny-models` target")
        window = fields.get(SLIDING_WINDOW)
        if not isinstance(window, int) or window < 1:
            raise TinyModelError(f"{path}: {SLIDING_WINDOW} is {window!r}; expected a positive integer")
        ratios = fields.get(COMPRESS_RATIOS)
        if not isinstance(ratios, list) or not ratios or set(ratios) - set(RATIOS):
            raise TinyModelError(f"{path}: {COMPRESS_RATIOS} is {ratios!r}; expected one of {RATIOS} per layer")
        self.n_swa = window
        self.direct: np.ndarray = _rms(emb) @ out.T  # [prev, next]
        self.embedding = emb
        self.head = out
        scale = CONTEXT_GAIN * float(t["blk.0.attn_output_b.weight"].std())
        self.arch = TinyArch(emb.shape[0], emb.shape[1], name, scale, window, tuple(ratios))
        rng = np.random.default_rng(int.from_bytes(bytes.fromhex(sha256)[:8], "little"))
        self.token_rows = rng.standard_normal((emb.shape[0], CONTEXT_DIM))
        self.projection = rng.standard_normal((emb.shape[0], CONTEXT_DIM)) * (scale / np.sqrt(CONTEXT_DIM))
        self._decay = DECAY ** np.arange(max(window, RECENT_BLOCKS) + 1)
        self._norm = float(np.sqrt((DECAY ** (2 * np.arange(1, RECENT_ROWS + 1))).sum()
                                   + (DECAY ** (2 * np.arange(RECENT_BLOCKS))).sum()))

    def new_cache(self, capacity: int) -> EngineCache:
        return EngineCache(self.n_swa, CONTEXT_DIM, capacity, self.arch.compress_ratios)

    def _blocks(self, rows: np.ndarray, visible: int) -> np.ndarray:
        recent = rows[max(0, visible - RECENT_BLOCKS):visible][::-1]
        total: np.ndarray = (self._decay[: len(recent), None] * recent).sum(axis=0)
        return total

    def context(self, cache: EngineCache, p: int) -> np.ndarray:
        """The context vector at position p (after p's own writes): the ring rows the query reads, each
        weighted by how far behind p the position it stands for lies (p's own row and rows over RECENT_ROWS
        behind left out), averaged over the layers' rings, and each compressor layer's visible compressed
        rows, the newest weighted most."""
        rows, ages = cache.raw_ages(p)
        keep = (ages >= 1) & (ages <= RECENT_ROWS)
        weights = self._decay[ages[keep], None]
        read = [(weights * ring[rows[keep]]).sum(axis=0) for ring in cache.raw]
        c = read[0] + sum((r - read[0]) / len(read) for r in read[1:])  # the mean, exactly read[0] where all agree
        for compressor, visible in zip(cache.compressors.values(), cache.visible(p), strict=True):
            c = c + self._blocks(compressor.rows, visible)
        vector: np.ndarray = c / self._norm
        return vector

    def forward(self, tokens: Sequence[int], cache: EngineCache, all_logits: bool = False) -> torch.Tensor:
        """Token by token at the cache's position, as the engine's causal batch does (the same numbers)."""
        if not tokens:
            raise ValueError("forward needs at least one token")
        if cache.length + len(tokens) > cache.capacity:
            raise ValueError(f"{cache.length} + {len(tokens)} tokens exceed the cache capacity {cache.capacity}")
        rows = []
        for index, token in enumerate(tokens):
            p = cache.write(self.token_rows[token])
            if all_logits or index == len(tokens) - 1:
                rows.append(self.direct[token] + self.projection @ self.context(cache, p))
            cache.advance()
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
