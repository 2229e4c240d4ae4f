"""The environment the reference server reads once at start.

The DS4 activation and policy variables are read under both prefixes, ``DFLASH_DS4_`` and
``LUCE_DS4_`` (older and newer builds of the real server): either works; both set to different
values is refused. The ``DS4REF_`` variables belong to this server alone, so the gate (which strips
the DS4 families before each arm) passes them through untouched:

- ``DS4REF_DTYPE``: bfloat16 (default), float16 or float32;
- ``DS4REF_THREADS``: CPU threads for PyTorch (default: PyTorch's own choice);
- ``DS4REF_LEAK_FUSED_VERIFY=1``: a deliberate fault for the self-test. Speculative requests verify
  approximately (they keep the batched verification's tokens) while still claiming reference-exact
  verification in the trace and banner, which only the token comparison can catch.
- ``DS4REF_FAULT=near-tie|stale-compressor|skip-restore``, ``DS4REF_FAULT_SEED`` (default 0) and
  ``DS4REF_FAULT_LOG`` (a path): one small planted verifier fault for the sensitivity benchmark
  (``refserver.faults`` says what each does); it too keeps claiming reference-exact verification.
  ``DS4REF_FAULT`` also takes every name of the real-engine mutant catalogue (``no-rollback``,
  ``restore-without-replay`` ... ``replay-drops-last-accepted``: ``faults.ENGINE_MUTANTS``, all 27;
  tiny-models targets only), each the wrong behaviour of its source substitution in this server's
  reference-exact loop and its per-layer engine-shaped cache; the five the catalogue calls equivalent
  (``faults.EQUIVALENT``, the indexer's two among them: the double keeps no indexer) change nothing.
  Which ones the shipped tiny models catch, at which widths: docs/benchmarks.md, "CPU mirror".

``DS4_TIMING`` and ``DS4_TOKEN_TRACE`` (either prefix) make speculative requests print the spec
loop's per-step compare/timing lines and per-token lines, in the real build's formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ds4ci.refserver.faults import FAULTS, FaultPlan

PREFIXES = ("DFLASH_DS4_", "LUCE_DS4_")
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
          "float32": "float32", "fp32": "float32"}
DEFAULT_Q = 2
MAX_Q = 16


class EnvError(ValueError):
    """The environment holds something the server refuses to start with (exit 1)."""


@dataclass(frozen=True)
class RefEnv:
    spec: bool
    draft: Path | None
    q: int
    reference_exact: bool
    trace: bool
    fused_verify: bool
    leak_fused_verify: bool
    dtype: str
    threads: int | None
    timing: bool = False
    token_trace: bool = False
    fault: FaultPlan | None = None

    @property
    def approximate(self) -> bool:
        """Speculative requests keep the batched verification's tokens (honestly or by the leak fault)."""
        return self.fused_verify or self.leak_fused_verify or not self.reference_exact

    @property
    def claims_reference_exact(self) -> bool:
        """What the trace and banner say: honest, except under the leak fault."""
        return self.reference_exact and not self.fused_verify


def _ds4(env: Mapping[str, str], name: str) -> str | None:
    values = {f"{p}{name}": env[f"{p}{name}"] for p in PREFIXES if f"{p}{name}" in env}
    if len(set(values.values())) > 1:
        shown = " and ".join(f"{k}={v!r}" for k, v in values.items())
        raise EnvError(f"{shown} disagree; set one value (the server reads either prefix)")
    return next(iter(values.values()), None)


def _flag(value: str | None, name: str) -> bool:
    if value is None or value == "":
        return False
    if value not in ("0", "1"):
        raise EnvError(f"{name} must be 0 or 1, found {value!r}")
    return value == "1"


def _int(value: str | None, name: str, low: int, high: int, default: int | None) -> int | None:
    if value is None or value == "":
        return default
    try:
        number = int(value, 10)
    except ValueError:
        raise EnvError(f"{name} must be an integer in {low}..{high}, found {value!r}") from None
    if not low <= number <= high:
        raise EnvError(f"{name} must be an integer in {low}..{high}, found {number}")
    return number


def read_env(env: Mapping[str, str]) -> RefEnv:
    spec = _flag(_ds4(env, "SPEC"), "DS4_SPEC")
    draft_text = _ds4(env, "DRAFT")
    q = _int(_ds4(env, "SPEC_Q"), "DS4_SPEC_Q", 1, MAX_Q, DEFAULT_Q)
    assert q is not None
    dtype_text = env.get("DS4REF_DTYPE", "bfloat16")
    if dtype_text not in DTYPES:
        raise EnvError(f"DS4REF_DTYPE must be one of {', '.join(sorted(set(DTYPES.values())))}, found {dtype_text!r}")
    return RefEnv(
        spec=spec,
        draft=Path(draft_text) if draft_text else None,
        q=q,
        reference_exact=_flag(_ds4(env, "SPEC_REFERENCE_EXACT"), "DS4_SPEC_REFERENCE_EXACT"),
        trace=_flag(_ds4(env, "EXACT_VERIFY_TRACE"), "DS4_EXACT_VERIFY_TRACE"),
        fused_verify=_flag(_ds4(env, "FUSED_VERIFY"), "DS4_FUSED_VERIFY"),
        leak_fused_verify=_flag(env.get("DS4REF_LEAK_FUSED_VERIFY"), "DS4REF_LEAK_FUSED_VERIFY"),
        dtype=DTYPES[dtype_text],
        threads=_int(env.get("DS4REF_THREADS"), "DS4REF_THREADS", 1, 1024, None),
        timing=_flag(_ds4(env, "TIMING"), "DS4_TIMING"),
        token_trace=_flag(_ds4(env, "TOKEN_TRACE"), "DS4_TOKEN_TRACE"),
        fault=_fault(env),
    )


def _fault(env: Mapping[str, str]) -> FaultPlan | None:
    name = env.get("DS4REF_FAULT", "")
    seed = _int(env.get("DS4REF_FAULT_SEED"), "DS4REF_FAULT_SEED", 0, (1 << 63) - 1, 0)
    log = env.get("DS4REF_FAULT_LOG", "")
    if not name:
        if env.get("DS4REF_FAULT_SEED") or log:
            raise EnvError("DS4REF_FAULT_SEED and DS4REF_FAULT_LOG need DS4REF_FAULT (one of "
                           f"{', '.join(FAULTS)})")
        return None
    if name not in FAULTS:
        raise EnvError(f"DS4REF_FAULT must be one of {', '.join(FAULTS)}, found {name!r}")
    assert seed is not None
    return FaultPlan(name, seed, Path(log) if log else None)
