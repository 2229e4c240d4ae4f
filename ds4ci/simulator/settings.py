"""Start-up settings of the simulator: command line plus the environment read once at start.

The command line is the real server's (design.md section 2). Unknown flags are refused by
argparse with exit 2, like the real binary. Environment problems the real server would die on
(missing draft, ``LUCE_MMVQ_MAX_NCOLS`` below the width) exit 1; broken simulator knobs
(``DS4SIM_*``) are usage errors, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ds4ci import __version__
from ds4ci.errors import Ds4ciError, UsageError
from ds4ci.simulator.faults import FAULTS, Arm, FaultSet, parse_faults

DFLASH_PREFIX = "DFLASH_DS4_"
LUCE_PREFIX = "LUCE_DS4_"
DEFAULT_Q = 2
MAX_Q = 16
_DEVICE = re.compile(r"^(hip|cuda|cpu):[0-9]+$")
_HASH_BUFFER = 1 << 20


class SimStartupError(Ds4ciError):
    """The simulated server refuses to start, as the real one would (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Args:
    target: Path
    host: str
    port: int
    max_ctx: int
    chunk: int
    target_device: str
    fused_decode: bool
    prefill: str


@dataclass(frozen=True)
class SimSettings:
    args: Args
    target_sha256: str
    spec: bool
    draft: Path | None
    draft_sha256: str | None
    q: int
    reference_exact: bool
    fused_verify: bool  # effective: the variable, or the leak-fused-verify fault
    trace: bool  # effective: the variable, unless the no-trace fault
    adaptive_width: bool
    mmvq_max_ncols: int | None
    env_prefix: str  # the family actually read: DFLASH_DS4_ or LUCE_DS4_ (then DFLASH_DS4_)
    faults: FaultSet
    arm: Arm
    startup_delay_s: float
    token_delay_s: float
    listen_late: bool

    def fault(self, name: str) -> bool:
        return self.faults.active(name, self.arm)


def _device(text: str) -> str:
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"expected hip:N, cuda:N or cpu:N, got {text!r}")
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port 1..65535, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 1..65535, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ds4ci-sim",
        description=(
            "Protocol double of the DS4 inference server (dflash_server) with a deterministic toy "
            "target and draft model. Speculation and tracing are chosen by DFLASH_DS4_* environment "
            "variables read at start-up; DS4SIM_FAULTS breaks the contract on purpose. "
            "See docs/simulator.md."
        ),
        allow_abbrev=False,  # the real binary matches flags exactly; so must we
    )
    parser.add_argument("target", type=Path, metavar="TARGET.gguf", help="target model file (its bytes key the toy model)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8080, help="port to bind (default 8080)")
    parser.add_argument("--max-ctx", type=_positive, default=4096, help="context size in tokens (default 4096)")
    parser.add_argument("--chunk", type=_positive, default=512, help="prefill chunk size (default 512)")
    parser.add_argument("--target-device", type=_device, default="cuda:0", help="hip:N or cuda:N (default cuda:0)")
    parser.add_argument("--ds4-fused-decode", action="store_true", help="fused decode kernels (recorded only)")
    parser.add_argument("--ds4-prefill", choices=("exact", "fast"), default="exact", help="prefill mode (recorded only)")
    parser.add_argument("--version", action="version", version=f"ds4ci-sim {__version__}")
    parser.add_argument(
        "--list-faults", action=_ListFaults, nargs=0, help="list the DS4SIM_FAULTS switches and exit"
    )
    return parser


class _ListFaults(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        for name, (scope, text) in FAULTS.items():
            print(f"{name:24} [{scope:6}] {text}")
        parser.exit(0)


def parse_args(argv: Sequence[str]) -> Args:
    ns = build_parser().parse_args(list(argv))
    return Args(
        target=ns.target,
        host=ns.host,
        port=ns.port,
        max_ctx=ns.max_ctx,
        chunk=ns.chunk,
        target_device=ns.target_device,
        fused_decode=ns.ds4_fused_decode,
        prefill=ns.ds4_prefill,
    )


def sha256_file(path: Path, what: str) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(_HASH_BUFFER):
                digest.update(chunk)
    except OSError as exc:
        raise SimStartupError(f"failed to load {what} model {str(path)!r}: {exc.strerror or exc}") from None
    return digest.hexdigest()


class _Env:
    """Reads the server's policy family under the prefix(es) this server version knows."""

    def __init__(self, environ: Mapping[str, str], luce: bool) -> None:
        self._environ = environ
        self._prefixes = (LUCE_PREFIX, DFLASH_PREFIX) if luce else (DFLASH_PREFIX,)

    def raw(self, name: str) -> tuple[str, str] | None:
        for prefix in self._prefixes:
            if prefix + name in self._environ:
                return prefix + name, self._environ[prefix + name]
        return None

    def flag(self, name: str, default: bool = False) -> bool:
        found = self.raw(name)
        if found is None:
            return default
        var, value = found
        if value.strip() not in ("0", "1"):
            raise SimStartupError(f"{var} must be 0 or 1, got {value!r}")
        return value.strip() == "1"

    def integer(self, name: str) -> int | None:
        found = self.raw(name)
        return None if found is None else _int_var(*found)


def _int_var(var: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise SimStartupError(f"{var} must be an integer, got {value!r}") from None


def _seconds(environ: Mapping[str, str], var: str) -> float:
    text = environ.get(var, "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{var} must be a number of seconds >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{var} must be a number of seconds >= 0, got {text!r}")
    return value


def load_settings(args: Args, environ: Mapping[str, str]) -> SimSettings:
    """Validate the environment exactly once, at start-up, as the real server does."""
    faults = parse_faults(environ.get("DS4SIM_FAULTS", ""))
    startup_delay = _seconds(environ, "DS4SIM_STARTUP_DELAY")
    token_delay = _seconds(environ, "DS4SIM_TOKEN_DELAY")
    listen_late = environ.get("DS4SIM_LISTEN_LATE", "0").strip() == "1"
    luce = any(f.name == "luce-prefix" for f in faults.faults)
    env = _Env(environ, luce)

    spec = env.flag("SPEC")
    q = env.integer("SPEC_Q")
    q = DEFAULT_Q if q is None else q
    if spec and not 2 <= q <= MAX_Q:
        raise SimStartupError(f"speculation width q must be 2..{MAX_Q}, got {q}")
    arm = Arm(spec=spec, q=q)
    reference_exact = env.flag("SPEC_REFERENCE_EXACT")
    fused_verify = env.flag("FUSED_VERIFY") or (spec and faults.active("leak-fused-verify", arm))
    trace = env.flag("EXACT_VERIFY_TRACE") and not faults.active("no-trace", arm)
    adaptive = env.flag("ADAPTIVE_WIDTH", default=True)
    ncols_text = environ.get("LUCE_MMVQ_MAX_NCOLS")
    ncols = None if ncols_text is None else _int_var("LUCE_MMVQ_MAX_NCOLS", ncols_text)
    if spec and ncols is not None and ncols < q:
        raise SimStartupError(
            f"LUCE_MMVQ_MAX_NCOLS={ncols} is below the speculation width q={q}: the verifier "
            f"needs q columns per matrix-vector product; set LUCE_MMVQ_MAX_NCOLS >= {q}"
        )

    target_sha = sha256_file(args.target, "target")
    draft: Path | None = None
    draft_sha: str | None = None
    if spec:
        found = env.raw("DRAFT")
        if found is None or not found[1]:
            raise SimStartupError(f"speculation is on but {DFLASH_PREFIX}DRAFT names no draft model")
        draft = Path(found[1])
        draft_sha = sha256_file(draft, "draft")

    return SimSettings(
        args=args,
        target_sha256=target_sha,
        spec=spec,
        draft=draft,
        draft_sha256=draft_sha,
        q=q,
        reference_exact=reference_exact,
        fused_verify=fused_verify,
        trace=trace,
        adaptive_width=adaptive,
        mmvq_max_ncols=ncols,
        env_prefix=LUCE_PREFIX if luce else DFLASH_PREFIX,
        faults=faults,
        arm=arm,
        startup_delay_s=startup_delay,
        token_delay_s=token_delay,
        listen_late=listen_late,
    )
