"""Random tensors in the types the real files use, written through gguf's writer and Q8_0 quantizer.

Shapes are given in ggml order (``ne``: the fastest-varying dimension first), as the loaders state
them; numpy holds them reversed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

Q8_0 = GGMLQuantizationType.Q8_0
WEIGHT_STD = 0.05


class TensorSink:
    """Adds tensors to one GGUF file, drawing every value from one seeded generator, in call order."""

    def __init__(self, writer: GGUFWriter, rng: np.random.Generator) -> None:
        self.writer = writer
        self.rng = rng

    def _normal(self, ne: Sequence[int], std: float) -> np.ndarray:
        data: np.ndarray = self.rng.standard_normal(tuple(reversed(ne)), dtype=np.float32) * np.float32(std)
        return data

    def q8(self, name: str, ne: Sequence[int], std: float = WEIGHT_STD, zero_rows: Sequence[int] = ()) -> None:
        """A matmul weight, quantized to Q8_0; ``zero_rows`` (indices along ne[1]) are all zero."""
        data = self._normal(ne, std)
        if zero_rows:
            data[..., list(zero_rows), :] = 0.0
        self.q8_values(name, data)

    def q8_values(self, name: str, data: np.ndarray) -> None:
        """Given values (numpy order), quantized to Q8_0."""
        if data.shape[-1] % 32:
            raise ValueError(f"{name}: Q8_0 needs ne[0] divisible by 32, got {data.shape[-1]}")
        self.writer.add_tensor(name, quantize(data.astype(np.float32), Q8_0), raw_dtype=Q8_0)

    def f16(self, name: str, ne: Sequence[int], std: float = WEIGHT_STD) -> np.ndarray:
        """A random F16 tensor; returns the values written."""
        data: np.ndarray = self._normal(ne, std).astype(np.float16)
        self.writer.add_tensor(name, data)
        return data

    def f32(self, name: str, ne: Sequence[int], std: float = WEIGHT_STD) -> None:
        self.writer.add_tensor(name, self._normal(ne, std))

    def f32_values(self, name: str, data: np.ndarray) -> None:
        self.writer.add_tensor(name, data.astype(np.float32))

    def const(self, name: str, ne: Sequence[int], value: float) -> None:
        self.writer.add_tensor(name, np.full(tuple(reversed(ne)), value, dtype=np.float32))

    def expert_ids(self, name: str, used: int, n_vocab: int, n_expert: int) -> None:
        """A hash layer's table: for each token, ``used`` distinct expert IDs (I32, ne = [used, n_vocab])."""
        rows = np.stack([self.rng.permutation(n_expert)[:used] for _ in range(n_vocab)]).astype(np.int32)
        self.writer.add_tensor(name, rows)
