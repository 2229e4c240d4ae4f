"""An engine-shaped cache for the tiny models' double: the DS4 engine's rolling state, layer for layer.

Mirrors what the lucebox engine's cache holds (fork 41ee7d0, ``src/deepseek4/deepseek4_graph.cpp``:
the per-layer cache allocation, the raw ring, the compressor step, ``ds4_comp_rows_used``,
``deepseek4_snapshot_save/restore``), one entry per layer of the file's ``compress_ratios``, with
one row of ``dim`` numbers per token standing in for a layer's key/value row (every layer writes the
same row: the double's layers are not chained):

- **raw ring** (every layer): ``n_swa`` rows (the target file's ``attention.sliding_window``),
  addressed by position, ``row = pos % n_swa``. Before the ring wraps a query at ``p`` reads rows
  ``0..p``; after the wrap it reads the whole ring, each row as the position it stands for in the
  window (``p - ((p - row) % n_swa)``), whatever wrote it last. So the rows a rejected draft wrote
  past the commit alias older positions once the ring has wrapped, unless the snapshot puts them back.
- **ratio-4 compressor** (a layer of ratio 4): eight state rows, ``prev`` (0-3) and ``cur`` (4-7). A
  token at ``pos`` writes ``cur`` row ``pos % 4``; at ``pos % 4 == 3`` the eight rows are pooled (their
  mean) into compressed row ``pos // 4`` and then ``cur`` is copied into ``prev``. Not idempotent: a
  replay over a block boundary without the state restored pools a ``prev`` that holds the block itself.
  (The engine's ratio-4 layers also keep the indexer's compressor and rows, which no attention reads
  under the exact prefill: the double keeps none.)
- **ratio-128 compressor** (a layer of ratio 128): a 128-row position ring (``pos % 128``) pooled at
  ``pos % 128 == 127`` into compressed row ``pos // 128``: idempotent on a replay that rewrites every
  row the rejected tokens wrote before the pool reads them (not so a rejected token past the
  boundary, whose row is one the next pool of the block reads).
- **visible compressed rows** (``n_comp``, one per compressor layer): every forward sets
  ``n_comp = max(n_comp, next_pos // ratio)``; a query at ``p`` sees
  ``min(max(n_comp, (p + 1) // ratio), cap)`` rows. Without ``n_comp`` restored, a compressed row
  that rejected tokens completed stays visible before its block is reached again.

A snapshot copies all of it and the position; ``restore`` puts it back, less the parts a planted
mutant names (``refserver.faults``), in every layer or in one. ``truncate`` keeps a verify's rows
below a commit, as the engine's cheap rollback does, for the approximate verifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RATIO4 = 4
RATIO128 = 128
RATIOS = (0, RATIO4, RATIO128)  # a layer's compress ratio: 0 (the raw ring alone), 4 or 128
PARTS = ("raw", "compressor", "n_comp", "comp_rows")  # what a restore can leave out


@dataclass
class Compressor:
    """One layer's compressor: its state rows (ratio 4: ``prev`` and ``cur``), compressed rows and count."""

    ratio: int
    state: np.ndarray
    rows: np.ndarray
    n_comp: int = 0

    @classmethod
    def empty(cls, ratio: int, dim: int, capacity: int) -> Compressor:
        halves = 2 if ratio == RATIO4 else 1
        return cls(ratio, np.zeros((halves * ratio, dim)), np.zeros((capacity // ratio + 1, dim)))

    def copy(self) -> Compressor:
        return Compressor(self.ratio, self.state.copy(), self.rows.copy(), self.n_comp)

    def write(self, p: int, row: np.ndarray, sticky: set[int]) -> None:
        r = self.ratio
        overlapped = r == RATIO4
        self.state[(r if overlapped else 0) + p % r] = row
        if p % r != r - 1:
            return
        if not (overlapped and p // r in sticky):
            self.rows[p // r] = self.state.mean(axis=0)
        if overlapped:
            self.state[:r] = self.state[r:]


@dataclass(frozen=True)
class EngineSnapshot:
    position: int
    raw: np.ndarray
    compressors: dict[int, Compressor]


class EngineCache:
    """The target's cache; ``length`` is the engine's ``cur_pos``: where the next forward writes."""

    def __init__(self, n_swa: int, dim: int, capacity: int, ratios: Sequence[int]) -> None:
        if n_swa < 1:
            raise ValueError(f"sliding window {n_swa}: expected at least one raw row")
        if not ratios or set(ratios) - set(RATIOS):
            raise ValueError(f"compress ratios {list(ratios)}: expected one of {RATIOS} per layer")
        self.n_swa = n_swa
        self.capacity = capacity
        self.length = 0
        self.raw = np.zeros((len(ratios), n_swa, dim))  # [layer, row]
        self.compressors = {il: Compressor.empty(r, dim, capacity) for il, r in enumerate(ratios) if r}
        self.sticky: set[int] = set()  # ratio-4 blocks whose row is never recomputed (the stale-compressor fault)
        self._written: dict[int, np.ndarray] = {}  # the latest row written at each recent position (for truncate)

    @property
    def layers(self) -> int:
        return len(self.raw)

    def compressor(self, ratio: int) -> Compressor:
        """The first layer's compressor of this ratio."""
        return next(c for c in self.compressors.values() if c.ratio == ratio)

    def write(self, row: np.ndarray) -> int:
        """One token's writes at ``length`` in every layer (ring row, compressor steps); returns its position."""
        p = self.length
        if p >= self.capacity:
            raise ValueError(f"position {p} is past the cache capacity {self.capacity}")
        self.raw[:, p % self.n_swa] = row
        self._written[p] = row
        self._written.pop(p - 2 * self.n_swa - RATIO128, None)
        for compressor in self.compressors.values():
            compressor.write(p, row, self.sticky)
        return p

    def advance(self) -> None:
        """After a token's forward: the counts as of the next position, and the position itself."""
        self.length += 1
        for c in self.compressors.values():
            c.n_comp = max(c.n_comp, self.length // c.ratio)

    def raw_ages(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """The ring rows a query at ``p`` reads, and how far behind ``p`` each one's position in the window is."""
        if p + 1 <= self.n_swa:
            rows = np.arange(p + 1)
            return rows, p - rows
        rows = np.arange(self.n_swa)
        return rows, (p - rows) % self.n_swa

    def visible(self, p: int) -> tuple[int, ...]:
        """Compressed rows a query at ``p`` sees, per compressor layer (in layer order)."""
        return tuple(min(max(c.n_comp, (p + 1) // c.ratio), len(c.rows)) for c in self.compressors.values())

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(self.length, self.raw.copy(), {il: c.copy() for il, c in self.compressors.items()})

    def restore(self, snap: EngineSnapshot, skip: frozenset[str] = frozenset(), layer: int | None = None) -> None:
        """Put a snapshot back, less the ``skip`` parts (``PARTS``) in ``layer`` (None: in every layer; -1: the
        last); the position always comes back."""
        unknown = skip - set(PARTS)
        if unknown:
            raise ValueError(f"unknown cache part(s) {sorted(unknown)}; expected some of {', '.join(PARTS)}")
        skipped = set(range(self.layers)) if layer is None else {range(self.layers)[layer]}

        def kept(part: str, il: int) -> bool:
            return part not in skip or il not in skipped

        for il in range(self.layers):
            if kept("raw", il):
                self.raw[il] = snap.raw[il]
        for il, c in self.compressors.items():
            saved = snap.compressors[il]
            if kept("compressor", il):
                c.state[:] = saved.state
            if kept("comp_rows", il):
                sticky = {b: c.rows[b].copy() for b in self.sticky} if c.ratio == RATIO4 else {}
                c.rows[:] = saved.rows
                for block, row in sticky.items():
                    c.rows[block] = row
            if kept("n_comp", il):
                c.n_comp = saved.n_comp
        self.length = snap.position

    def truncate(self, snap: EngineSnapshot, commit: int) -> None:
        """Keep what a verify from ``snap``'s position wrote below ``commit``, and nothing past it: the result the
        engine's cheap rollback reaches (raw rows past the commit and a ``prev`` half flushed at or past it put
        back, the counts set from the commit), reached here by restoring ``snap`` and writing the committed
        rows again (the same numbers: a row is written whole)."""
        start, end = snap.position, self.length
        if not start <= commit <= end:
            raise ValueError(f"cannot truncate a verify of positions {start}..{end - 1} to {commit}")
        rows = [self._written[p] for p in range(start, commit)]
        self.restore(snap)
        for row in rows:
            self.write(row)
            self.advance()

    def seek(self, position: int) -> None:
        """Where the next forward writes, nothing else changed (the engine passes each forward its position)."""
        if not 0 <= position <= self.capacity:
            raise ValueError(f"position {position} is outside the cache (capacity {self.capacity})")
        self.length = position

    def keep_row(self, position: int) -> None:
        """The stale-compressor fault: the compressed row of ``position``'s ratio-4 block is kept from now on."""
        self.sticky.add(position // RATIO4)
