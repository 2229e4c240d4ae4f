"""The reference server's command line: exactly the DS4 server's, checked before anything loads.

``TARGET.gguf --host H --port P --max-ctx N --chunk N --target-device cuda:N|hip:N|cpu
--ds4-prefill exact [--ds4-fused-decode] [--ds4-expert-top-k K]``. Unknown or malformed options
exit 2, as do the HIP-only options on any other device, with the real server's message. No
PyTorch is imported here, so refusals are immediate.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ds4ci import __version__
from ds4ci.judging.protocol import HIP_ONLY_REFUSAL

EXIT_USAGE = 2
HIP_ONLY_MESSAGE = HIP_ONLY_REFUSAL
PREFILL_MODES = ("exact", "dense", "sparse")
_DEVICE = re.compile(r"^(?:(cuda|hip):([0-9]+)|cpu(?::[0-9]+)?)$")


@dataclass(frozen=True)
class Args:
    target: Path
    host: str
    port: int
    max_ctx: int
    chunk: int
    target_device: str  # as given, e.g. hip:0
    torch_device: str  # what PyTorch calls it: cuda:N for cuda:N and hip:N (ROCm builds), cpu
    prefill: str
    fused_decode: bool
    expert_top_k: int | None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"[server] {self.prog}: error: {message}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)


def _bounded(low: int, high: int, what: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be in {low}..{high}, got {value}")
        return value

    return convert


def _device(text: str) -> str:
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"expected cuda:N, hip:N or cpu, got {text!r}")
    return text


def torch_device_name(target_device: str) -> str:
    match = _DEVICE.match(target_device)
    if match is None:
        raise ValueError(f"not a device: {target_device!r}")
    kind, index = match.groups()
    return "cpu" if kind is None else f"cuda:{index}"  # ROCm builds of PyTorch name HIP devices cuda:N


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="ds4ci-refserver",
        description=(
            "Reference DS4-protocol server on real PyTorch kernels: a tiny Llama-like decoder whose weights "
            "come from the model files' SHA-256. Environment (either prefix DFLASH_DS4_ or LUCE_DS4_): SPEC, DRAFT, "
            "SPEC_Q, SPEC_REFERENCE_EXACT, EXACT_VERIFY_TRACE, FUSED_VERIFY; DS4REF_DTYPE "
            "(bfloat16|float16|float32, default bfloat16), DS4REF_THREADS, DS4REF_LEAK_FUSED_VERIFY, "
            "DS4REF_FAULT (+ _SEED, _LOG). A GGUF target from `ds4ci tiny-models` is served by the tiny models' double."
        ),
        allow_abbrev=False,
    )
    p.add_argument("target", type=Path, metavar="TARGET.gguf", help="target model file (its SHA-256 seeds the weights)")
    p.add_argument("--host", default="0.0.0.0", help="IPv4 address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=_bounded(1, 65535, "--port"), default=8080, help="TCP port (default 8080)")
    p.add_argument("--max-ctx", type=_bounded(16, 1 << 24, "--max-ctx"), default=131072, help="context size")
    p.add_argument("--chunk", type=_bounded(1, 1 << 20, "--chunk"), default=512, help="prefill chunk size in tokens")
    p.add_argument("--target-device", type=_device, default="cuda:0", help="cuda:N, hip:N or cpu")
    p.add_argument("--ds4-prefill", choices=PREFILL_MODES, default="exact", help="prefill mode (only exact is implemented)")
    p.add_argument("--ds4-fused-decode", action="store_true", help="accepted on hip:N only, as by the real server")
    p.add_argument("--ds4-expert-top-k", type=_bounded(1, 1024, "--ds4-expert-top-k"), default=None,
                   help="accepted on hip:N only; the reference model has no experts")
    p.add_argument("--version", action="version", version=f"ds4ci-refserver {__version__}")
    return p


def parse_args(argv: Sequence[str]) -> Args:
    """Parse or exit 2 with a message (never a traceback)."""
    ns = parser().parse_args(list(argv))
    device: str = ns.target_device
    if (ns.ds4_fused_decode or ns.ds4_expert_top_k is not None) and not device.startswith("hip:"):
        print(HIP_ONLY_MESSAGE, file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)
    if ns.ds4_prefill != "exact":
        print(f"[server] --ds4-prefill {ns.ds4_prefill}: ds4ci-refserver implements only exact prefill",
              file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)
    return Args(
        target=ns.target,
        host=ns.host,
        port=ns.port,
        max_ctx=ns.max_ctx,
        chunk=ns.chunk,
        target_device=device,
        torch_device=torch_device_name(device),
        prefill=ns.ds4_prefill,
        fused_decode=bool(ns.ds4_fused_decode),
        expert_top_k=ns.ds4_expert_top_k,
    )
