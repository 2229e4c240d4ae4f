"""What machine produced the evidence: GPU identity and health, toolchain, host.

:func:`fingerprint` runs every probe concurrently under one hard deadline (ds4ci.runner.probes),
parses what they print (ds4ci.runner.hostinfo) and assembles exactly the ``fingerprint`` object of
results.json v1; :class:`Background` takes it in a thread while the gate's first server loads.
Every probe is optional: a missing tool or file is recorded as ``missing``, never guessed.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ds4ci.records import FingerprintRecord, GpuRecord
from ds4ci.runner.hostinfo import (
    HIPCONFIG,
    MAX_GPUS,
    NVCC,
    NVIDIA_SMI_QUERY,
    ROCMINFO,
    HipInfo,
    clean_text,
    parse_cpuinfo,
    parse_cuda_version_json,
    parse_first_line,
    parse_hipconfig,
    parse_nvcc_version,
    parse_nvidia_smi_csv,
    parse_os_release,
    parse_rocminfo,
)
from ds4ci.runner.probes import ProbeResult, ProbeSpec, run_probes

HealthStatus = Literal["ok", "unhealthy", "timeout", "unknown"]

# --- assembly -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFiles:
    """Where host facts are read from (absolute paths; tests point them at fixtures)."""

    os_release: Path = Path("/etc/os-release")
    cpuinfo: Path = Path("/proc/cpuinfo")
    dmi_product: Path = Path("/sys/class/dmi/id/product_name")
    dmi_vendor: Path = Path("/sys/class/dmi/id/sys_vendor")
    amdgpu_version: Path = Path("/sys/module/amdgpu/version")


def _rocm_root(env: Mapping[str, str]) -> Path:
    return Path(env.get("ROCM_PATH") or "/opt/rocm")


def _cuda_root(env: Mapping[str, str]) -> Path:
    return Path(env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda")


def probe_specs(env: Mapping[str, str], files: HostFiles) -> list[ProbeSpec]:
    rocm_bin = (_rocm_root(env) / "bin",)
    cuda_bin = (_cuda_root(env) / "bin",)
    return [
        ProbeSpec("nvidia-smi", argv=NVIDIA_SMI_QUERY),
        ProbeSpec("rocminfo", argv=ROCMINFO, fallback_dirs=rocm_bin),
        ProbeSpec("hipconfig", argv=HIPCONFIG, fallback_dirs=rocm_bin),
        ProbeSpec("nvcc", argv=NVCC, fallback_dirs=cuda_bin),
        ProbeSpec("rocm-version-file", path=_rocm_root(env) / ".info" / "version"),
        ProbeSpec("cuda-version-json", path=_cuda_root(env) / "version.json"),
        ProbeSpec("amdgpu-module-version", path=files.amdgpu_version),
        ProbeSpec("os-release", path=files.os_release),
        ProbeSpec("cpuinfo", path=files.cpuinfo),
        ProbeSpec("dmi-product", path=files.dmi_product),
        ProbeSpec("dmi-vendor", path=files.dmi_vendor),
    ]


def _ok_text(results: Mapping[str, ProbeResult], name: str) -> str | None:
    result = results.get(name)
    return result.stdout if result is not None and result.status == "ok" else None


def assess_health(results: Mapping[str, ProbeResult]) -> tuple[HealthStatus, str]:
    """Fail closed: any probe that hangs makes ``timeout``; a GPU tool answering wrongly, ``unhealthy``."""
    # Any probe that hangs counts, not only the GPU tools: on a wedged ROCm box hipconfig or a
    # sysfs read can hang as well, and then nothing this runner reports can be trusted.
    timeouts = [f"{r.name}: {r.detail}" for r in results.values() if r.status == "timeout"]
    bad: list[str] = []
    good: list[str] = []
    smi = results.get("nvidia-smi")
    if smi is not None and smi.status == "failed":
        bad.append(f"nvidia-smi failed ({smi.detail})")
    elif smi is not None and smi.status == "ok":
        rows = parse_nvidia_smi_csv(smi.stdout)
        if rows:
            good.append(f"nvidia-smi lists {len(rows)} GPU(s): {', '.join(g.name for g in rows)}")
        else:
            bad.append(f"nvidia-smi answered but listed no GPU: {smi.stdout.strip()[:300]!r}")
    roc = results.get("rocminfo")
    if roc is not None and roc.status == "failed":
        bad.append(f"rocminfo failed ({roc.detail})")
    elif roc is not None and roc.status == "ok":
        agents = parse_rocminfo(roc.stdout).gpus
        gfx = [a for a in agents if a.name.startswith("gfx")]
        if gfx:
            good.append("rocminfo lists " + ", ".join(f"{a.name} ({a.marketing_name or 'no marketing name'})" for a in gfx))
        else:
            bad.append("rocminfo answered but listed no GPU agent with a gfx name")
    if timeouts:
        return "timeout", "; ".join(timeouts + bad)
    if bad:
        return "unhealthy", "; ".join(bad)
    if good:
        return "ok", "; ".join(good)
    return "unknown", "no GPU tool found (nvidia-smi, rocminfo): GPU health was not checked"


def _gpus(results: Mapping[str, ProbeResult], amd_driver: str | None) -> list[GpuRecord]:
    gpus: list[GpuRecord] = []
    smi = _ok_text(results, "nvidia-smi")
    if smi is not None:
        for gpu in parse_nvidia_smi_csv(smi):
            gpus.append(
                {
                    "vendor": "nvidia",
                    "name": clean_text(gpu.name) or "unknown",
                    "arch": gpu.arch,
                    "memory_mib": gpu.memory_mib,
                    "driver": clean_text(gpu.driver),
                }
            )
    roc = _ok_text(results, "rocminfo")
    if roc is not None:
        for agent in parse_rocminfo(roc).gpus:
            gpus.append(
                {
                    "vendor": "amd" if (agent.vendor or "AMD").upper() == "AMD" else "unknown",
                    "name": agent.marketing_name or agent.name,
                    "arch": agent.name if agent.name.startswith("gfx") else None,
                    "memory_mib": agent.memory_mib,
                    "driver": amd_driver,
                }
            )
    return gpus[:MAX_GPUS]


def assemble(results: Mapping[str, ProbeResult], uname: os.uname_result | None = None) -> FingerprintRecord:
    """Build the schema's ``fingerprint`` object from probe results (no I/O besides uname)."""
    uts = uname if uname is not None else os.uname()
    roc_text = _ok_text(results, "rocminfo")
    rocm_info = parse_rocminfo(roc_text) if roc_text is not None else None
    module_file = _ok_text(results, "amdgpu-module-version")
    amd_driver = (rocm_info.kernel_driver if rocm_info else None) or (
        parse_first_line(module_file) if module_file else None
    )
    smi_text = _ok_text(results, "nvidia-smi")
    nvidia = parse_nvidia_smi_csv(smi_text) if smi_text is not None else []
    hip_text = _ok_text(results, "hipconfig")
    hip = parse_hipconfig(hip_text) if hip_text is not None else HipInfo(None, None)
    nvcc_text = _ok_text(results, "nvcc")
    cuda_json = _ok_text(results, "cuda-version-json")
    rocm_file = _ok_text(results, "rocm-version-file")
    toolchain = {
        "nvidia_driver": clean_text(nvidia[0].driver) if nvidia else None,
        "cuda_toolkit": (parse_nvcc_version(nvcc_text) if nvcc_text else None)
        or (parse_cuda_version_json(cuda_json) if cuda_json else None),
        "rocm": parse_first_line(rocm_file) if rocm_file else None,
        "hip": hip.version,
        "hip_clang": hip.clang,
        "amdgpu_driver": clean_text(amd_driver),
    }
    os_text = _ok_text(results, "os-release")
    cpu_text = _ok_text(results, "cpuinfo")
    product = _ok_text(results, "dmi-product")
    vendor = _ok_text(results, "dmi-vendor")
    host = {
        "hostname": clean_text(socket.gethostname()),
        "kernel": clean_text(uts.release),
        "machine": clean_text(uts.machine),
        "os": parse_os_release(os_text) if os_text else None,
        "host_model": parse_first_line(product) if product else None,
        "host_vendor": parse_first_line(vendor) if vendor else None,
        "cpu": parse_cpuinfo(cpu_text) if cpu_text else None,
        "cpu_count": str(os.cpu_count()) if os.cpu_count() else None,
    }
    status, detail = assess_health(results)
    return {
        "gpus": _gpus(results, clean_text(amd_driver)),
        "health": {"status": status, "detail": clean_text(detail) or status},
        "toolchain": toolchain,
        "host": host,
        "probes": {name: result.status for name, result in results.items()},
    }


def collect(
    deadline_s: float,
    progress: Callable[[str], None] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    files: HostFiles | None = None,
) -> tuple[FingerprintRecord, dict[str, ProbeResult]]:
    """Run every probe under ``deadline_s``; return the fingerprint and the raw probe results."""
    environ = dict(os.environ if env is None else env)
    specs = probe_specs(environ, files or HostFiles())
    if progress is not None:
        progress(f"probing {len(specs)} sources concurrently (hard deadline {deadline_s:g} s)")
    results = run_probes(specs, deadline_s, env=environ, progress=progress)
    fp = assemble(results)
    if progress is not None:
        progress(f"GPU health: {fp['health']['status']}: {fp['health']['detail']}")
    return fp, results


def fingerprint(deadline_s: float = 20.0, progress: Callable[[str], None] | None = None) -> FingerprintRecord:
    """The ``fingerprint`` object of results.json v1 for this machine, within ~deadline_s."""
    fp, _ = collect(deadline_s, progress)
    return fp


class Background:
    """:func:`fingerprint` taken in a daemon thread (the gate starts it as its first server loads).

    :meth:`result` waits for it and returns the fingerprint, or raises exactly the error that
    ``fingerprint`` raised, so a caller records either as if it had called ``fingerprint`` itself.
    The probes' own deadline bounds the wait.
    """

    def __init__(self, deadline_s: float = 20.0, progress: Callable[[str], None] | None = None) -> None:
        self._value: FingerprintRecord | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._take, args=(deadline_s, progress), name="ds4ci-fingerprint", daemon=True
        )
        self._thread.start()

    def _take(self, deadline_s: float, progress: Callable[[str], None] | None) -> None:
        try:
            self._value = fingerprint(deadline_s, progress)
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc

    def result(self) -> FingerprintRecord:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value
