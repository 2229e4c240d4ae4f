"""An engine-shaped cache for the tiny models' double: the DS4 engine's rolling state, row for row.

Mirrors what the lucebox engine's cache holds (fork 41ee7d0, ``src/deepseek4/deepseek4_graph.cpp``:
the raw ring, the compressor step, ``ds4_comp_rows_used``, ``deepseek4_snapshot_save/restore``),
with one row of ``dim`` numbers per token standing in for a layer's key/value row:

- **raw ring**: ``n_swa`` rows (the target file's ``attention.sliding_window``), addressed by
  position, ``row = pos % n_swa``. Before the ring wraps a query at ``p`` reads rows ``0..p``; after
  the wrap it reads the whole ring, each row as the position it stands for in the window
  (``p - ((p - row) % n_swa)``), whatever wrote it last. So the rows a rejected draft wrote past the
  commit alias older positions once the ring has wrapped, unless the snapshot puts them back.
- **ratio-4 compressor**: eight state rows, ``prev`` (0-3) and ``cur`` (4-7). A token at ``pos``
  writes ``cur`` row ``pos % 4``; at ``pos % 4 == 3`` the eight rows are pooled (their mean) into
  compressed row ``pos // 4`` and then ``cur`` is copied into ``prev``. Not idempotent: a replay over
  a block boundary without the state restored pools a ``prev`` that holds the block itself.
- **ratio-128 compressor**: a 128-row position ring (``pos % 128``) pooled at ``pos % 128 == 127``
  into compressed row ``pos // 128``: idempotent on a replay that rewrites every row the rejected
  tokens wrote before the pool reads them (not so a rejected token past the boundary, whose row
  is one the next pool of the block reads).
- **visible compressed rows** (``n_comp``, one per ratio): every forward sets
  ``n_comp = max(n_comp, next_pos // ratio)``; a query at ``p`` sees
  ``min(max(n_comp, (p + 1) // ratio), cap)`` rows. Without ``n_comp`` restored, a compressed row
  that rejected tokens completed stays visible before its block is reached again.

A snapshot copies all of it and the position; ``restore`` puts it back, less the parts a planted
mutant names (``refserver.faults``). ``truncate`` keeps a verify's rows below a commit, as the
engine's cheap rollback does, for the approximate verifier.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RATIO4 = 4
RATIO128 = 128
PARTS = ("raw", "compressor", "n_comp", "comp_rows")  # what a restore can leave out


@dataclass(frozen=True)
class EngineSnapshot:
    position: int
    raw: np.ndarray
    state4: np.ndarray
    state128: np.ndarray
    comp4: np.ndarray
    comp128: np.ndarray
    n_comp4: int
    n_comp128: int


class EngineCache:
    """The target's cache; ``length`` is the engine's ``cur_pos``: where the next forward writes."""

    def __init__(self, n_swa: int, dim: int, capacity: int) -> None:
        if n_swa < 1:
            raise ValueError(f"sliding window {n_swa}: expected at least one raw row")
        self.n_swa = n_swa
        self.capacity = capacity
        self.length = 0
        self.raw = np.zeros((n_swa, dim))
        self.state4 = np.zeros((2 * RATIO4, dim))
        self.state128 = np.zeros((RATIO128, dim))
        self.comp4 = np.zeros((capacity // RATIO4 + 1, dim))
        self.comp128 = np.zeros((capacity // RATIO128 + 1, dim))
        self.n_comp4 = 0
        self.n_comp128 = 0
        self.sticky: set[int] = set()  # ratio-4 blocks whose row is never recomputed (the stale-compressor fault)
        self._written: dict[int, np.ndarray] = {}  # the latest row written at each recent position (for truncate)

    def write(self, row: np.ndarray) -> int:
        """One token's writes at ``length`` (ring row, compressor steps); returns its position."""
        p = self.length
        if p >= self.capacity:
            raise ValueError(f"position {p} is past the cache capacity {self.capacity}")
        self.raw[p % self.n_swa] = row
        self._written[p] = row
        self._written.pop(p - 2 * self.n_swa - RATIO128, None)
        self.state4[RATIO4 + p % RATIO4] = row
        if p % RATIO4 == RATIO4 - 1:
            if p // RATIO4 not in self.sticky:
                self.comp4[p // RATIO4] = self.state4.mean(axis=0)
            self.state4[:RATIO4] = self.state4[RATIO4:]
        self.state128[p % RATIO128] = row
        if p % RATIO128 == RATIO128 - 1:
            self.comp128[p // RATIO128] = self.state128.mean(axis=0)
        return p

    def advance(self) -> None:
        """After a token's forward: the counts as of the next position, and the position itself."""
        self.length += 1
        self.n_comp4 = max(self.n_comp4, self.length // RATIO4)
        self.n_comp128 = max(self.n_comp128, self.length // RATIO128)

    def raw_ages(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """The ring rows a query at ``p`` reads, and how far behind ``p`` each one's position in the window is."""
        if p + 1 <= self.n_swa:
            rows = np.arange(p + 1)
            return rows, p - rows
        rows = np.arange(self.n_swa)
        return rows, (p - rows) % self.n_swa

    def visible(self, p: int) -> tuple[int, int]:
        """Compressed rows (ratio 4, ratio 128) a query at ``p`` sees."""
        return (min(max(self.n_comp4, (p + 1) // RATIO4), len(self.comp4)),
                min(max(self.n_comp128, (p + 1) // RATIO128), len(self.comp128)))

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(self.length, self.raw.copy(), self.state4.copy(), self.state128.copy(),
                              self.comp4.copy(), self.comp128.copy(), self.n_comp4, self.n_comp128)

    def restore(self, snap: EngineSnapshot, skip: frozenset[str] = frozenset()) -> None:
        """Put a snapshot back, less the ``skip`` parts (``PARTS``); the position always comes back."""
        unknown = skip - set(PARTS)
        if unknown:
            raise ValueError(f"unknown cache part(s) {sorted(unknown)}; expected some of {', '.join(PARTS)}")
        if "raw" not in skip:
            self.raw[:] = snap.raw
        if "compressor" not in skip:
            self.state4[:] = snap.state4
            self.state128[:] = snap.state128
        if "comp_rows" not in skip:
            kept = {b: self.comp4[b].copy() for b in self.sticky}
            self.comp4[:] = snap.comp4
            self.comp128[:] = snap.comp128
            for block, row in kept.items():
                self.comp4[block] = row
        if "n_comp" not in skip:
            self.n_comp4, self.n_comp128 = snap.n_comp4, snap.n_comp128
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
