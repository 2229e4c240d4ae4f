"""Environment sanitisation and the arms' environments (docs/protocol.md).

Every arm starts from the inherited environment with all server *policy* removed, then gets the
same fixed common policy, then only its own activation variables. The evidence records each
arm's policy part and their difference, so a reviewer can see the arms differ only where the
contract allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ds4ci.records import Arm, InheritedVariable

TARGET_ONLY: Final = "target-only"
REFERENCE_EXACT: Final = "reference-exact"

ENV_PREFIXES = ("DFLASH_", "LUCE_")  # builds read DFLASH_DS4_* (older) or LUCE_DS4_* (newer), no fallback
POLICY_PREFIXES = (
    "DFLASH_DS4_", "DFLASH_EXPERT_", "DFLASH_MOE_",
    "LUCE_DS4_", "LUCE_EXPERT_", "LUCE_MOE_",
)
POLICY_NAMES = frozenset({
    "DFLASH_MMQ_SUB_BATCH", "GGML_BATCH_PEER_COPIES", "GGML_CUDA_BATCH_PEER_COPIES", "LUCE_MMVQ_MAX_NCOLS",
    "DFLASH_ADAPTIVE_SPEC_WIDTH", "LUCE_ADAPTIVE_SPEC_WIDTH",
})
# What follows the build's prefix (DFLASH_ or LUCE_) in the variables the two arms may differ in.
# DS4_SPEC_Q is read by the speculative path only, so the target-only server may lack it.
ACTIVATION_SUFFIXES = ("DS4_SPEC", "DS4_DRAFT", "DS4_SPEC_REFERENCE_EXACT", "DS4_SPEC_Q")
# Inherited variables of these families are recorded (name and value) as provenance: the ones that
# are passed through change numerics in both arms alike, and a reviewer must see them.
PROVENANCE_PREFIXES = ("DFLASH_", "LUCE_", "GGML_", "HIP_", "HSA_", "ROCR_", "ROCM_", "CUDA_", "NVIDIA_")


# Credentials a GitHub job may carry. The server under test is built from the PR and needs none.
CREDENTIAL_VARIABLES = frozenset({
    "GITHUB_TOKEN", "GH_TOKEN", "INPUT_GITHUB-TOKEN", "INPUT_GITHUB_TOKEN", "INPUT_TOKEN",
    "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL",
})


def is_policy(name: str) -> bool:
    return name in POLICY_NAMES or name.startswith(POLICY_PREFIXES)


@dataclass(frozen=True)
class ArmEnvironment:
    arm: Arm
    q: int | None
    env: Mapping[str, str]  # the complete environment the server process gets

    def policy(self) -> dict[str, str]:
        return {k: v for k, v in sorted(self.env.items()) if is_policy(k)}


def removed_policy(inherited: Mapping[str, str]) -> list[str]:
    """Names of inherited policy variables that are stripped (values are not recorded: may be paths)."""
    return sorted(k for k in inherited if is_policy(k))


# Diagnostic variables that only make the build print (docs/protocol.md): the per-token trace
# (``[ds4-spec-token]``, documented as "DIAGNOSTIC: per-token speculative trace on stderr") and the
# timing lines (``[ds4-spec-cmp]``, ``[ds4-spec-t] step=``). Both arms get them, so the arms still
# differ only in activation; their lines are what fixes the counters of a counterless summary.
DIAGNOSTIC_SUFFIXES = ("DS4_TOKEN_TRACE", "DS4_TIMING")


# The exact-differential trace (docs/protocol.md): a file in the server's own sandbox scratch folder (its
# ``/tmp``, fresh per process), the same path in every arm; the gate seals it after the server stopped. Its
# documentation says it only adds device read-backs and changes no arithmetic; only the DFLASH_ spelling exists,
# and the writer stays off unless DFLASH_DS4_EXACT_TRACE_Q is 1..4 (a label of the prefill width in its records).
EXACT_TRACE_NAME = "ds4ci-exact-trace.jsonl"
EXACT_TRACE_POLICY = {"DFLASH_DS4_EXACT_TRACE_PATH": f"/tmp/{EXACT_TRACE_NAME}", "DFLASH_DS4_EXACT_TRACE_Q": "1"}  # noqa: S108


def common_policy(mmvq_max_ncols: int, prefixes: Sequence[str], exact_trace: bool = False) -> dict[str, str]:
    """The fixed policy every arm shares: trace on, diagnostics on, fixed width, MMVQ columns for the widest q,
    and the exact-differential trace where the server runs sandboxed (``exact_trace``) and DFLASH_ is read."""
    policy = {"LUCE_MMVQ_MAX_NCOLS": str(mmvq_max_ncols)}
    if exact_trace and "DFLASH_" in prefixes:
        policy.update(EXACT_TRACE_POLICY)
    for prefix in prefixes:
        policy[f"{prefix}DS4_EXACT_VERIFY_TRACE"] = "1"
        policy[f"{prefix}DS4_ADAPTIVE_WIDTH"] = "0"
        for suffix in DIAGNOSTIC_SUFFIXES:
            policy[f"{prefix}{suffix}"] = "1"
    return policy


def activation(prefixes: Sequence[str], draft: str, q: int) -> dict[str, str]:
    """The reference-exact arm's activation, under every configured prefix."""
    values = {"DS4_SPEC": "1", "DS4_DRAFT": draft, "DS4_SPEC_Q": str(q), "DS4_SPEC_REFERENCE_EXACT": "1"}
    return {f"{prefix}{suffix}": values[suffix] for prefix in prefixes for suffix in ACTIVATION_SUFFIXES}


def is_activation(name: str) -> bool:
    return any(name == f"{prefix}{suffix}" for prefix in ENV_PREFIXES for suffix in ACTIVATION_SUFFIXES)


def _sanitised(inherited: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in inherited.items() if not is_policy(k) and k not in CREDENTIAL_VARIABLES}


def provenance(inherited: Mapping[str, str]) -> list[InheritedVariable]:
    """Every inherited variable of the provenance families: name, value, and whether servers get it."""
    return [
        {"name": name, "value": value, "passed": not is_policy(name)}
        for name, value in sorted(inherited.items())
        if name.startswith(PROVENANCE_PREFIXES)
    ]


def target_only_env(
    inherited: Mapping[str, str], mmvq_max_ncols: int, prefixes: Sequence[str], exact_trace: bool = False,
) -> ArmEnvironment:
    env = _sanitised(inherited)
    env.update(common_policy(mmvq_max_ncols, prefixes, exact_trace))
    return ArmEnvironment(TARGET_ONLY, None, env)


def reference_exact_env(
    inherited: Mapping[str, str], mmvq_max_ncols: int, prefixes: Sequence[str], draft: str, q: int,
    exact_trace: bool = False,
) -> ArmEnvironment:
    env = _sanitised(inherited)
    env.update(common_policy(mmvq_max_ncols, prefixes, exact_trace))
    env.update(activation(prefixes, draft, q))
    return ArmEnvironment(REFERENCE_EXACT, q, env)


def difference(a: ArmEnvironment, b: ArmEnvironment) -> list[str]:
    """Every variable (policy or not) whose presence or value differs between two arms, sorted."""
    names = set(a.env) | set(b.env)
    return sorted(n for n in names if a.env.get(n) != b.env.get(n))


def check_only_activation_differs(a: ArmEnvironment, b: ArmEnvironment) -> list[str]:
    """Variables that differ although the contract forbids it (empty when the arms are sound)."""
    return [name for name in difference(a, b) if not is_activation(name)]
