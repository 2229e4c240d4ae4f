"""What machine produced the evidence: GPU identity and health, toolchain, host.

Parsers are plain functions over the text the tools print (tested on real captured output in
tests/data/fingerprint/); :func:`fingerprint` runs every probe concurrently under one hard
deadline (ds4ci.runner.probes) and assembles exactly the ``fingerprint`` object of results.json v1.
Every probe is optional: a missing tool or file is recorded as ``missing``, never guessed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ds4ci.records import FingerprintRecord, GpuRecord
from ds4ci.runner.probes import ProbeResult, ProbeSpec, run_probes

HealthStatus = Literal["ok", "unhealthy", "timeout", "unknown"]

# Field order matters: the parser reads columns by position (noheader). nounits keeps
# memory a bare number; the parser still accepts "143771 MiB" in case a wrapper adds units.
NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=name,driver_version,memory.total,compute_cap",
    "--format=csv,noheader,nounits",
)
ROCMINFO = ("rocminfo",)
HIPCONFIG = ("hipconfig", "--full")
NVCC = ("nvcc", "--version")

MAX_GPUS = 16  # schema: gpus.maxItems
TEXT_MAX = 4096  # schema: $defs/text maxLength
_AGENT = re.compile(r"^\s*Agent\s+\d+\s*$")
_FIELD = re.compile(r"^(?P<indent> *)(?P<key>[^:]+?):\s*(?P<value>.*?)\s*$")
_LEADING_INT = re.compile(r"^\s*(\d+)")
_ROCK = re.compile(r"ROCk module version (\S+) is loaded")
_NVCC_RELEASE = re.compile(r"release (\d+(?:\.\d+)*),\s*V(\d+(?:\.\d+)*)")
_HIP_VERSION = re.compile(r"^HIP version\s*:\s*(\S+)", re.MULTILINE)
_CLANG = re.compile(r"^(?:AMD |HCC )?clang version \S.*$", re.MULTILINE)
_NA = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]"}


def _text(value: str | None) -> str | None:
    """Clean a value for the schema's ``text``: stripped, non-empty, at most 4096 characters."""
    if value is None:
        return None
    value = value.strip()
    return value[:TEXT_MAX] if value else None


# --- NVIDIA ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvidiaGpu:
    name: str
    driver: str | None
    memory_mib: int | None
    compute_cap: str | None

    @property
    def arch(self) -> str | None:
        """``sm_90`` for compute capability 9.0: the spelling runner labels and nvcc use."""
        if self.compute_cap is None or not re.fullmatch(r"\d+\.\d+", self.compute_cap):
            return None
        major, minor = self.compute_cap.split(".")
        return f"sm_{major}{minor}"


def _na(value: str) -> str | None:
    value = value.strip()
    return None if value.lower() in _NA else value


def parse_nvidia_smi_csv(text: str) -> list[NvidiaGpu]:
    """Rows of ``nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap
    --format=csv,noheader,nounits``. Lines that are not four comma-separated fields (error
    messages printed instead of rows) are skipped, so the caller sees no GPU rather than junk.
    """
    gpus = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 4 or not parts[0]:
            continue
        name, driver, memory, cap = parts
        mem_match = re.fullmatch(r"(\d+)(?:\s*MiB)?", memory)
        gpus.append(
            NvidiaGpu(
                name=name,
                driver=_na(driver),
                memory_mib=int(mem_match.group(1)) if mem_match else None,
                compute_cap=_na(cap),
            )
        )
    return gpus


def parse_nvcc_version(text: str) -> str | None:
    """``13.0.88`` from ``Cuda compilation tools, release 13.0, V13.0.88``."""
    match = _NVCC_RELEASE.search(text)
    if match is None:
        return None
    return match.group(2)


def parse_cuda_version_json(text: str) -> str | None:
    """``cuda.version`` from the toolkit's ``version.json``; None when absent or malformed."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    cuda = doc.get("cuda") if isinstance(doc, dict) else None
    version = cuda.get("version") if isinstance(cuda, dict) else None
    return _text(version) if isinstance(version, str) else None


# --- AMD ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RocmAgent:
    name: str
    marketing_name: str | None
    vendor: str | None
    device_type: str | None
    compute_units: int | None
    memory_mib: int | None

    @property
    def is_gpu(self) -> bool:
        return (self.device_type or "").upper() == "GPU"


@dataclass(frozen=True)
class RocmInfo:
    kernel_driver: str | None  # "ROCk module version X is loaded" (amdgpu/KFD), when printed
    agents: tuple[RocmAgent, ...] = field(default=())

    @property
    def gpus(self) -> tuple[RocmAgent, ...]:
        return tuple(agent for agent in self.agents if agent.is_gpu)


def _leading_int(value: str) -> int | None:
    match = _LEADING_INT.match(value)
    return int(match.group(1)) if match else None


def _agent_from_lines(lines: list[str]) -> RocmAgent | None:
    top: dict[str, str] = {}
    global_pool_kb: int | None = None
    in_pools = False
    segment: str | None = None
    for line in lines:
        match = _FIELD.match(line)
        if match is None:
            continue
        indent, key, value = len(match.group("indent")), match.group("key").strip(), match.group("value")
        # Agent-level fields are indented two spaces; ISA and pool entries deeper. Only the
        # first top-level occurrence counts, so an ISA "Name:" never replaces the agent's.
        if indent <= 2:
            in_pools = key == "Pool Info"
            top.setdefault(key, value)
            continue
        if in_pools and key == "Segment":
            segment = value
        elif in_pools and key == "Size" and global_pool_kb is None and (segment or "").startswith("GLOBAL"):
            size = _leading_int(value)
            if size is not None and value.rstrip().endswith("KB"):
                global_pool_kb = size
    name = _text(top.get("Name"))
    if name is None:
        return None
    return RocmAgent(
        name=name,
        marketing_name=_text(top.get("Marketing Name")),
        vendor=_text(top.get("Vendor Name")),
        device_type=_text(top.get("Device Type")),
        compute_units=_leading_int(top.get("Compute Unit", "")),
        memory_mib=global_pool_kb // 1024 if global_pool_kb is not None else None,
    )


def parse_rocminfo(text: str) -> RocmInfo:
    """Agents of ``rocminfo`` output (CPU agents included; see :attr:`RocmInfo.gpus`)."""
    rock = _ROCK.search(text)
    sections: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if _AGENT.match(line):
            current = []
            sections.append(current)
        elif current is not None:
            current.append(line)
    agents = tuple(agent for agent in (_agent_from_lines(s) for s in sections) if agent is not None)
    return RocmInfo(kernel_driver=rock.group(1) if rock else None, agents=agents)


@dataclass(frozen=True)
class HipInfo:
    version: str | None
    clang: str | None


def parse_hipconfig(text: str) -> HipInfo:
    """HIP version and HIP compiler line from ``hipconfig --full`` (or bare ``--version``)."""
    match = _HIP_VERSION.search(text)
    version = match.group(1) if match else None
    if version is None:
        stripped = text.strip()
        # `hipconfig --version` prints the bare version, without a newline.
        if stripped and "\n" not in stripped and re.fullmatch(r"\d+\.\d+[\w.+-]*", stripped):
            version = stripped
    clang = _CLANG.search(text)
    return HipInfo(version=_text(version), clang=_text(clang.group(0)) if clang else None)


def parse_first_line(text: str) -> str | None:
    """First non-empty line: ``/opt/rocm/.info/version``, DMI ``product_name`` and the like."""
    for line in text.splitlines():
        if line.strip():
            return _text(line)
    return None


# --- host -----------------------------------------------------------------------------------


def parse_os_release(text: str) -> str | None:
    """``PRETTY_NAME`` of os-release(5), shell-unquoted; falls back to ``NAME VERSION``."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or not key.strip() or key.strip().startswith("#"):
            continue
        try:
            words = shlex.split(raw, comments=False, posix=True)
        except ValueError:
            words = [raw.strip().strip("\"'")]
        values[key.strip()] = " ".join(words)
    pretty = values.get("PRETTY_NAME")
    if pretty:
        return _text(pretty)
    joined = " ".join(v for v in (values.get("NAME"), values.get("VERSION")) if v)
    return _text(joined)


def parse_cpuinfo(text: str) -> str | None:
    """The first ``model name`` of /proc/cpuinfo (``Model`` on some Arm kernels)."""
    fallback = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "model name" and value.strip():
            return _text(value)
        if key == "Model" and fallback is None and value.strip():
            fallback = value
    return _text(fallback)


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
                    "name": _text(gpu.name) or "unknown",
                    "arch": gpu.arch,
                    "memory_mib": gpu.memory_mib,
                    "driver": _text(gpu.driver),
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
        "nvidia_driver": _text(nvidia[0].driver) if nvidia else None,
        "cuda_toolkit": (parse_nvcc_version(nvcc_text) if nvcc_text else None)
        or (parse_cuda_version_json(cuda_json) if cuda_json else None),
        "rocm": parse_first_line(rocm_file) if rocm_file else None,
        "hip": hip.version,
        "hip_clang": hip.clang,
        "amdgpu_driver": _text(amd_driver),
    }
    os_text = _ok_text(results, "os-release")
    cpu_text = _ok_text(results, "cpuinfo")
    product = _ok_text(results, "dmi-product")
    vendor = _ok_text(results, "dmi-vendor")
    host = {
        "hostname": _text(socket.gethostname()),
        "kernel": _text(uts.release),
        "machine": _text(uts.machine),
        "os": parse_os_release(os_text) if os_text else None,
        "host_model": parse_first_line(product) if product else None,
        "host_vendor": parse_first_line(vendor) if vendor else None,
        "cpu": parse_cpuinfo(cpu_text) if cpu_text else None,
        "cpu_count": str(os.cpu_count()) if os.cpu_count() else None,
    }
    status, detail = assess_health(results)
    return {
        "gpus": _gpus(results, _text(amd_driver)),
        "health": {"status": status, "detail": _text(detail) or status},
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
