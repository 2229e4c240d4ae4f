"""A tiny Llama-like decoder in plain PyTorch, with a KV cache that can be snapshotted and cropped.

Pre-norm blocks: RMSNorm, rotary position embeddings, multi-head attention over the cache
(``scaled_dot_product_attention``), SwiGLU MLP; a final RMSNorm and an output head. Weights are
Gaussian, generated on the CPU in float32 from seeds derived from the model file's SHA-256 and
the tensor's name (so they are the same on every machine), then cast to the serving dtype and
moved to the device. Logits are returned in float32; the argmax takes the first maximum.

The cache only ever appends: a forward of T tokens writes positions [length, length + T). So a
snapshot is the length, and restoring it (``crop``) is exact: nothing below the snapshot was
touched, and whatever a rejected verification wrote above it is overwritten by the replay
(except a row the stale-compressor fault keeps: ``keep_row``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from ds4ci.refserver.modelfile import Arch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class CacheFull(RuntimeError):
    """A forward would write past the cache's capacity (a bug in the caller's sizing)."""


@dataclass
class Layer:
    attn_norm: torch.Tensor
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor


@dataclass
class Weights:
    embed: torch.Tensor
    layers: list[Layer]
    final_norm: torch.Tensor
    lm_head: torch.Tensor


def _seed(sha256_hex: str, name: str) -> int:
    digest = hashlib.sha256(bytes.fromhex(sha256_hex) + b"/" + name.encode("ascii")).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _gaussian(shape: tuple[int, ...], sha256_hex: str, name: str) -> torch.Tensor:
    generator = torch.Generator(device="cpu")
    generator.manual_seed(_seed(sha256_hex, name))
    return torch.randn(shape, generator=generator, dtype=torch.float32)


def _shapes(arch: Arch) -> dict[str, tuple[tuple[int, ...], float]]:
    """Every tensor's shape and initial scale (the standard deviation; norms start at 1)."""
    d, f = arch.dim, arch.ffn
    out: dict[str, tuple[tuple[int, ...], float]] = {"embed": ((arch.vocab, d), 1.0)}
    for i in range(arch.layers):
        out |= {
            f"layers.{i}.attn_norm": ((d,), 0.0),
            f"layers.{i}.wq": ((d, d), d ** -0.5),
            f"layers.{i}.wk": ((d, d), d ** -0.5),
            f"layers.{i}.wv": ((d, d), d ** -0.5),
            f"layers.{i}.wo": ((d, d), d ** -0.5),
            f"layers.{i}.mlp_norm": ((d,), 0.0),
            f"layers.{i}.w_gate": ((f, d), d ** -0.5),
            f"layers.{i}.w_up": ((f, d), d ** -0.5),
            f"layers.{i}.w_down": ((d, f), f ** -0.5),
        }
    out |= {"final_norm": ((d,), 0.0), "lm_head": ((arch.vocab, d), d ** -0.5)}
    return out


def _assemble(arch: Arch, tensors: dict[str, torch.Tensor]) -> Weights:
    names = [f.name for f in fields(Layer)]
    layers = [Layer(**{n: tensors[f"layers.{i}.{n}"] for n in names}) for i in range(arch.layers)]
    return Weights(tensors["embed"], layers, tensors["final_norm"], tensors["lm_head"])


def generate_tensors(arch: Arch, sha256_hex: str) -> dict[str, torch.Tensor]:
    """float32 CPU tensors of a model of its own, seeded by its file's SHA-256."""
    out = {}
    for name, (shape, scale) in _shapes(arch).items():
        out[name] = torch.ones(shape) if scale == 0.0 else _gaussian(shape, sha256_hex, name) * scale
    return out


def derive_tensors(arch: Arch, base: dict[str, torch.Tensor], sha256_hex: str, noise: float) -> dict[str, torch.Tensor]:
    """A draft: the target's tensors plus Gaussian noise of ``noise`` times each tensor's scale."""
    out = {}
    for name, (shape, scale) in _shapes(arch).items():
        out[name] = base[name] + _gaussian(shape, sha256_hex, name) * (noise * (scale or 1.0))
    return out


class AppendOnly:
    """A cache that only appends: a snapshot is its length, and restoring one forgets what lies above it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.length = 0

    def snapshot(self) -> int:
        return self.length

    def crop(self, length: int) -> None:
        """Restore a snapshot: forget every position at or above ``length``."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {length}")
        self.length = length

    def restore(self, snapshot: int) -> None:
        self.crop(snapshot)

    def truncate(self, snapshot: int, commit: int) -> None:
        """Keep what a verify from ``snapshot`` wrote below ``commit``."""
        if commit < snapshot:
            raise ValueError(f"cannot truncate a verify from {snapshot} to {commit}")
        self.crop(commit)


class KVCache(AppendOnly):
    def __init__(self, arch: Arch, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(capacity)
        shape = (arch.layers, capacity, arch.heads, arch.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.sticky: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # the stale-compressor fault's kept rows

    def keep_row(self, position: int) -> None:
        """The stale-compressor fault: the row now at ``position`` (all layers) survives every later write there."""
        self.sticky[position] = (self.k[:, position].clone(), self.v[:, position].clone())


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return normed.to(x.dtype) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, rotate-half convention; x is [T, H, hd], cos/sin are [T, 1, hd/2] float32."""
    half = x.shape[-1] // 2
    x32 = x.float()
    x1, x2 = x32[..., :half], x32[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Decoder:
    def __init__(self, arch: Arch, tensors: dict[str, torch.Tensor], dtype: torch.dtype, device: torch.device) -> None:
        self.arch = arch
        self.dtype = dtype
        self.device = device
        self.w = _assemble(arch, {n: t.to(device=device, dtype=dtype) for n, t in tensors.items()})
        hd = arch.head_dim
        self._inv_freq = 1.0 / (arch.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd))

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.arch, capacity, self.dtype, self.device)

    @torch.inference_mode()
    def forward(self, tokens: Sequence[int], cache: KVCache, all_logits: bool = False) -> torch.Tensor:
        """Feed ``tokens`` at the cache's end in one pass; float32 logits of every or only the last position."""
        a = self.arch
        count = len(tokens)
        start = cache.length
        if count == 0:
            raise ValueError("forward needs at least one token")
        if start + count > cache.capacity:
            raise CacheFull(f"{start} + {count} tokens exceed the cache capacity {cache.capacity}")
        end = start + count
        ids = torch.tensor(list(tokens), dtype=torch.long, device=self.device)
        x = self.w.embed[ids]
        angles = torch.arange(start, end, dtype=torch.float32, device=self.device)[:, None] * self._inv_freq[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        mask = None
        if count > 1:  # causal within the new tokens; a single token sees the whole cache
            keys_pos = torch.arange(end, device=self.device)[None, :]
            mask = keys_pos <= torch.arange(start, end, device=self.device)[:, None]
        for i, layer in enumerate(self.w.layers):
            h = _rms_norm(x, layer.attn_norm, a.norm_eps)
            q = _rotate(F.linear(h, layer.wq).view(count, a.heads, a.head_dim), cos, sin)
            k = _rotate(F.linear(h, layer.wk).view(count, a.heads, a.head_dim), cos, sin)
            v = F.linear(h, layer.wv).view(count, a.heads, a.head_dim)
            cache.k[i, start:end] = k
            cache.v[i, start:end] = v
            for pos, (kept_k, kept_v) in cache.sticky.items():
                if start <= pos < end:
                    cache.k[i, pos], cache.v[i, pos] = kept_k[i], kept_v[i]
            keys = cache.k[i, :end].transpose(0, 1)[None]
            values = cache.v[i, :end].transpose(0, 1)[None]
            attended = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, values, attn_mask=mask)
            x = x + F.linear(attended[0].transpose(0, 1).reshape(count, a.dim), layer.wo)
            h = _rms_norm(x, layer.mlp_norm, a.norm_eps)
            x = x + F.linear(F.silu(F.linear(h, layer.w_gate)) * F.linear(h, layer.w_up), layer.w_down)
        cache.length = end
        last = x if all_logits else x[-1:]
        return F.linear(_rms_norm(last, self.w.final_norm, a.norm_eps), self.w.lm_head).float()


def argmax(logits: torch.Tensor) -> list[int]:
    """The greedy token of every row (the first maximum on ties)."""
    picked: list[int] = torch.argmax(logits, dim=-1).tolist()
    return picked
