"""Which GPU a runner must have (``[runners.<name>] gpu``), checked against its fingerprint.

A name matches a GPU when it equals the GPU's architecture (``gfx1151``, ``sm_90``) or appears in
its name (``H200`` in ``NVIDIA H200``), case-insensitively. A list means any one of its names.
"""

from __future__ import annotations

from collections.abc import Sequence

from ds4ci.records import FingerprintRecord, GpuRecord


def matches(expected: str, gpu: GpuRecord) -> bool:
    want = expected.strip().lower()
    arch = (gpu.get("arch") or "").lower()
    return bool(want) and (want == arch or want in gpu["name"].lower())


def describe(gpus: Sequence[GpuRecord]) -> str:
    return "; ".join(f"{g['name']} ({g.get('arch') or 'arch ?'})" for g in gpus)


def gpu_problems(expected: Sequence[str], fp: FingerprintRecord, runner: str) -> list[str]:
    """[] when no GPU is expected or one of the runner's GPUs matches; else one problem saying what was found."""
    if not expected:
        return []
    wanted = " or ".join(repr(e) for e in expected)
    where = f"runner {runner!r} must have a GPU {wanted} (runners.{runner}.gpu)"
    if not fp["gpus"]:
        return [
            f"{where}, but no GPU was found (nvidia-smi and rocminfo saw none; probes: "
            f"{', '.join(f'{k}={v}' for k, v in fp['probes'].items() if k in ('nvidia-smi', 'rocminfo'))}); "
            "is this job on the right runner label, and is the GPU runtime installed?"
        ]
    if any(matches(e, gpu) for e in expected for gpu in fp["gpus"]):
        return []
    return [f"{where}, but this machine has {describe(fp['gpus'])}; the job ran on the wrong runner, or the setting is wrong"]
