"""The reference server's model files: what they say about the architecture, and their identity.

A model file is any file. Its SHA-256 seeds every weight, so the gate's pinned identity of the file
is the identity of the model. A file may start with one header line that fixes the architecture:

    ds4ref-model-v1 {"arch": {"vocab": 4096, "dim": 512, "layers": 4, "heads": 8, "ffn": 1408}}
    ds4ref-model-v1 {"draft_of_target": {"noise": 0.02}}

The first form is a model of its own (a target, or an independent draft); the second is a draft
made of the target's weights plus Gaussian noise of the given relative size (seeded by the draft
file's own hash), which agrees with the target often enough that speculation accepts drafts.
A file without the header gets the defaults of its role (``DEFAULT_ARCH`` for a target, a 2 %
noisy copy of the target for a draft). A file that starts with the header but does not parse is
refused with a message: fail closed, never a silent default.

No PyTorch here: the self-test and the tests write and read these files without it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MAGIC = "ds4ref-model-v1"
MAX_HEADER_BYTES = 64 * 1024
_READ_CHUNK = 1 << 20
DEFAULT_DRAFT_NOISE = 0.02


class ModelFileError(ValueError):
    """A model file cannot be used; the message says what was expected and what was found."""


@dataclass(frozen=True)
class Arch:
    vocab: int = 4096
    dim: int = 512
    layers: int = 4
    heads: int = 8
    ffn: int = 1408
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def describe(self) -> str:
        return (
            f"vocab={self.vocab} dim={self.dim} layers={self.layers} heads={self.heads} ffn={self.ffn} "
            f"rope_theta={self.rope_theta:g} norm_eps={self.norm_eps:g}"
        )


DEFAULT_ARCH = Arch()
_INT_BOUNDS = {"vocab": (256, 262144), "dim": (16, 8192), "layers": (1, 64), "heads": (1, 128), "ffn": (16, 32768)}


GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class ModelFile:
    path: Path
    sha256: str
    arch: Arch | None  # None: a draft derived from the target
    noise: float | None  # the derived draft's relative noise; None for a model of its own
    has_header: bool


def is_gguf(path: Path) -> bool:
    """Whether the file starts with GGUF's magic (the tiny models' files; ``tinydouble`` serves them)."""
    with path.open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _int_field(arch: dict[str, Any], name: str, where: str) -> int:
    value = arch[name]
    low, high = _INT_BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ModelFileError(f"{where}: arch.{name} must be an integer in {low}..{high}, found {value!r}")
    return value


def _float_field(arch: dict[str, Any], name: str, where: str, low: float, high: float) -> float:
    value = arch[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelFileError(f"{where}: arch.{name} must be a finite number, found {value!r}")
    if not low < value < high:
        raise ModelFileError(f"{where}: arch.{name} must be in ({low:g}, {high:g}), found {value!r}")
    return float(value)


def parse_arch(raw: object, where: str) -> Arch:
    if not isinstance(raw, dict):
        raise ModelFileError(f"{where}: 'arch' must be an object, found {type(raw).__name__}")
    known = {f for f in asdict(DEFAULT_ARCH)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ModelFileError(f"{where}: unknown arch field(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
    merged: dict[str, Any] = {**asdict(DEFAULT_ARCH), **raw}
    ints = {name: _int_field(merged, name, where) for name in _INT_BOUNDS}
    arch = Arch(
        **ints,
        rope_theta=_float_field(merged, "rope_theta", where, 1.0, 1e9),
        norm_eps=_float_field(merged, "norm_eps", where, 0.0, 1.0),
    )
    if arch.dim % arch.heads or arch.head_dim % 2:
        raise ModelFileError(
            f"{where}: arch.dim ({arch.dim}) must be a multiple of arch.heads ({arch.heads}) with an even head size "
            f"(rotary embeddings rotate pairs), found head size {arch.dim / arch.heads:g}"
        )
    return arch


def _parse_noise(raw: object, where: str) -> float:
    if not isinstance(raw, dict) or set(raw) - {"noise"}:
        raise ModelFileError(f"{where}: 'draft_of_target' must be an object with only 'noise', found {raw!r}"[:300])
    noise = raw.get("noise", DEFAULT_DRAFT_NOISE)
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0.0 <= noise <= 1.0:
        raise ModelFileError(f"{where}: draft_of_target.noise must be a number in 0..1, found {noise!r}")
    return float(noise)


def _header(path: Path) -> dict[str, Any] | None:
    with path.open("rb") as fh:
        head = fh.read(MAX_HEADER_BYTES + 1)
    if not head.startswith(MAGIC.encode("ascii")):
        return None
    line, newline, _ = head.partition(b"\n")
    if not newline:
        raise ModelFileError(f"{path}: the {MAGIC} header line is not terminated within {MAX_HEADER_BYTES} bytes")
    try:
        text = line.decode("utf-8")[len(MAGIC):]
        if not text.startswith(" "):
            raise ValueError(f"expected '{MAGIC} ' followed by a JSON object")
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelFileError(f"{path}: malformed {MAGIC} header ({exc})") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: the {MAGIC} header must hold a JSON object, found {type(data).__name__}")
    return data


def read_model_file(path: Path, role: str) -> ModelFile:
    """Identity and architecture of a target (``role='target'``) or draft (``role='draft'``) file."""
    if role not in ("target", "draft"):
        raise ValueError(f"role must be 'target' or 'draft', got {role!r}")
    try:
        header = _header(path)
        sha = file_sha256(path)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read the {role} model file ({exc.strerror or exc})") from exc
    where = f"{path}"
    if header is None:
        if role == "target":
            return ModelFile(path, sha, DEFAULT_ARCH, None, has_header=False)
        return ModelFile(path, sha, None, DEFAULT_DRAFT_NOISE, has_header=False)
    unknown = sorted(set(header) - {"arch", "draft_of_target", "comment"})
    if unknown:
        raise ModelFileError(f"{where}: unknown header field(s) {', '.join(unknown)}; expected arch or draft_of_target")
    if ("arch" in header) == ("draft_of_target" in header):
        raise ModelFileError(f"{where}: the header needs exactly one of 'arch' and 'draft_of_target'")
    if "draft_of_target" in header:
        if role == "target":
            raise ModelFileError(f"{where}: a target model file cannot be 'draft_of_target'; give it an 'arch'")
        return ModelFile(path, sha, None, _parse_noise(header["draft_of_target"], where), has_header=True)
    return ModelFile(path, sha, parse_arch(header["arch"], where), None, has_header=True)


def header_line(arch: Arch | None = None, draft_noise: float | None = None, comment: str | None = None) -> str:
    if (arch is None) == (draft_noise is None):
        raise ValueError("give exactly one of arch and draft_noise")
    body: dict[str, Any] = {"arch": asdict(arch)} if arch is not None else {"draft_of_target": {"noise": draft_noise}}
    if comment is not None:
        body["comment"] = comment
    return f"{MAGIC} {json.dumps(body, sort_keys=True)}\n"


def write_model_file(
    path: Path, arch: Arch | None = None, draft_noise: float | None = None, comment: str | None = None
) -> str:
    """Write a model file (header only: the hash of these bytes is the model) and return its SHA-256."""
    data = header_line(arch, draft_noise, comment).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()
