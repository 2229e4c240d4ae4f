"""Start-up settings of the simulator: the command line, then the environment read once at start.

The command line is the real server's. Unknown flags are refused by argparse with exit 2, like
the real binary, and so is ``--ds4-fused-decode`` on a target device that is not HIP. The policy
variables are parsed the way the real server parses them: a flag is on when it is set, not empty
and not ``0``; a number is read like C's ``atoi`` and ignored when out of range. Nothing in them
makes the real server refuse to start, so nothing makes the simulator refuse either. Broken
simulator knobs (``DS4SIM_*``) are usage errors, exit 2.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ds4ci import __version__
from ds4ci.errors import UsageError
from ds4ci.fileio import quit_on_broken_pipe
from ds4ci.judging.protocol import HIP_ONLY_REFUSAL
from ds4ci.simulator.card import ModelCard
from ds4ci.simulator.faults import FAULTS, Arm, FaultSet, parse_faults

DFLASH_PREFIX = "DFLASH_DS4_"
LUCE_PREFIX = "LUCE_DS4_"
TOY_BLOCK = 15  # the toy drafter's block size: widths 2..16
MAX_Q = TOY_BLOCK + 1
FAST_PATH_MAX_Q = 4  # without full snapshots the real decoder caps the width at 4
DEFAULT_TEARDOWN_S = 0.2
SLOW_TEARDOWN_S = 120.0
FUSED_DECODE_REFUSAL = HIP_ONLY_REFUSAL
_DEVICE = re.compile(r"^(hip|cuda|cpu):[0-9]+$")
_ATOI = re.compile(r"^\s*([+-]?[0-9]+)")


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
class Policy:
    """The server's policy variables as this build reads them (once, at start-up)."""

    prefixes: tuple[str, ...]  # the families read, in order
    spec: bool  # speculation requested
    draft: str | None  # the draft path named, if any
    q: int  # q_cap from the environment
    reference_exact: bool
    full_snap: bool
    seq_verify: bool
    timing: bool
    token_trace: bool
    fused_verify: bool  # the variable itself (the leak fault is applied in SimSettings)
    trace: bool
    adaptive_width: bool
    mmvq_max_ncols: str | None  # recorded only: the toy model has no kernels to choose


@dataclass(frozen=True)
class Knobs:
    """Simulator-only settings (``DS4SIM_*``), never stripped by the gate."""

    faults: FaultSet
    startup_delay_s: float
    token_delay_s: float
    teardown_delay_s: float
    override_dir: Path
    helper_pid_file: Path | None


@dataclass(frozen=True)
class SimSettings:
    args: Args
    policy: Policy
    knobs: Knobs
    target_sha256: str
    draft_sha256: str | None  # None: no draft loaded, so no speculation
    card: ModelCard

    @property
    def arm(self) -> Arm:
        return Arm(spec=self.policy.spec, q=self.policy.q)

    @property
    def faults(self) -> FaultSet:
        return self.knobs.faults

    def fault(self, name: str) -> bool:
        return self.knobs.faults.active(name, self.arm)

    @property
    def spec(self) -> bool:
        """Speculation available: requested and the draft loaded."""
        return self.draft_sha256 is not None

    @property
    def fused_verify(self) -> bool:
        return self.policy.fused_verify or (self.policy.spec and self.fault("leak-fused-verify"))

    @property
    def trace(self) -> bool:
        return self.policy.trace and not self.fault("no-trace") and not self.fault("fork-dialect")

    @property
    def teardown_delay_s(self) -> float:
        """Freeing the weights after the last answer; the slow-teardown fault makes it long."""
        slow = SLOW_TEARDOWN_S if self.fault("slow-teardown") else 0.0
        return max(self.knobs.teardown_delay_s, slow)


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
    parser.add_argument("--host", default="127.0.0.1", help="IPv4 address to bind (default 127.0.0.1; the real one: 0.0.0.0)")
    parser.add_argument("--port", type=_port, default=8080, help="port to bind (default 8080)")
    parser.add_argument("--max-ctx", type=_positive, default=131072, help="context size in tokens (default 131072)")
    parser.add_argument("--chunk", type=_positive, default=512, help="prefill chunk size (default 512)")
    parser.add_argument(
        "--target-device", type=_device, default="cuda:0", help="hip:N, cuda:N or cpu:N (default cuda:0: a CUDA build)"
    )
    parser.add_argument("--ds4-fused-decode", action="store_true", help="fused decode kernels (HIP only)")
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
        try:
            sys.stdout.write("".join(f"{name:26} [{scope:6}] {text}\n" for name, (scope, text) in FAULTS.items()))
            sys.stdout.flush()
        except BrokenPipeError:  # `ds4ci-sim --list-faults | head`: the reader has what it wanted
            quit_on_broken_pipe(0)
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


def fused_decode_refused(args: Args) -> bool:
    """The real server allows fused decode only on a single HIP device (a monolithic target)."""
    return args.fused_decode and not args.target_device.startswith("hip:")


def atoi(text: str) -> int:
    """C's atoi: the leading integer, 0 when there is none."""
    match = _ATOI.match(text)
    return int(match.group(1)) if match else 0


class _Env:
    """Reads the server's policy family under the prefix(es) this build knows, first found wins."""

    def __init__(self, environ: Mapping[str, str], prefixes: tuple[str, ...]) -> None:
        self._environ = environ
        self._prefixes = prefixes

    def raw(self, name: str) -> str | None:
        for prefix in self._prefixes:
            if prefix + name in self._environ:
                return self._environ[prefix + name]
        return None

    def flag(self, name: str, default: bool = False) -> bool:
        """On when set, not empty and not starting with '0' (the decoder's flag rule)."""
        value = self.raw(name)
        if value is None or (default and not value):
            return default
        return bool(value) and not value.startswith("0")

    def spec_flag(self) -> bool:
        """SPEC itself: on when set, not empty and not exactly '0' (the backend's flag rule)."""
        value = self.raw("SPEC")
        return bool(value) and value != "0"


def _q_cap(env: _Env, full_snap: bool) -> int:
    q = MAX_Q if full_snap else FAST_PATH_MAX_Q
    text = env.raw("SPEC_Q")
    if text is not None:
        value = atoi(text)
        if 2 <= value <= MAX_Q:
            q = value if full_snap else min(value, FAST_PATH_MAX_Q)
    return q


def read_policy(environ: Mapping[str, str], faults: FaultSet) -> Policy:
    if faults.has("luce-only"):
        prefixes: tuple[str, ...] = (LUCE_PREFIX,)
    elif faults.has("luce-prefix"):
        prefixes = (LUCE_PREFIX, DFLASH_PREFIX)
    else:
        prefixes = (DFLASH_PREFIX,)
    env = _Env(environ, prefixes)
    reference_exact = env.flag("SPEC_REFERENCE_EXACT")
    # The reference-exact verifier rolls back with full snapshots; FULL_SNAP asks for them alone.
    full_snap = env.flag("FULL_SNAP") or reference_exact
    return Policy(
        prefixes=prefixes,
        spec=env.spec_flag(),
        draft=env.raw("DRAFT") or None,
        q=_q_cap(env, full_snap),
        reference_exact=reference_exact,
        full_snap=full_snap,
        seq_verify=env.flag("SEQ_VERIFY"),
        timing=env.flag("TIMING"),
        token_trace=env.flag("TOKEN_TRACE"),
        fused_verify=env.flag("FUSED_VERIFY"),
        trace=env.flag("EXACT_VERIFY_TRACE"),
        adaptive_width=env.flag("ADAPTIVE_WIDTH", default=True),
        mmvq_max_ncols=environ.get("LUCE_MMVQ_MAX_NCOLS"),
    )


def _seconds(environ: Mapping[str, str], var: str, default: float = 0.0) -> float:
    text = environ.get(var, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{var} must be a number of seconds >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{var} must be a number of seconds >= 0, got {text!r}")
    return value


def read_knobs(environ: Mapping[str, str]) -> Knobs:
    faults = parse_faults(environ.get("DS4SIM_FAULTS", ""))
    pid_file = environ.get("DS4SIM_HELPER_PID_FILE", "").strip()
    return Knobs(
        faults=faults,
        startup_delay_s=_seconds(environ, "DS4SIM_STARTUP_DELAY"),
        token_delay_s=_seconds(environ, "DS4SIM_TOKEN_DELAY"),
        teardown_delay_s=_seconds(environ, "DS4SIM_TEARDOWN_DELAY", DEFAULT_TEARDOWN_S),
        override_dir=Path(environ.get("DS4SIM_OVERRIDE_DIR", "").strip() or "/tmp"),  # noqa: S108 - the real server's path
        helper_pid_file=Path(pid_file) if pid_file else None,
    )
