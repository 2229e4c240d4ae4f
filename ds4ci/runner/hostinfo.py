"""Parsers of what the fingerprint's probes print: nvidia-smi, nvcc, rocminfo, hipconfig, host files.

Plain functions over text, tested on real captured output in tests/data/fingerprint/;
ds4ci.runner.fingerprint runs the probes and assembles the results.json ``fingerprint`` object.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

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


def clean_text(value: str | None) -> str | None:
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
    return clean_text(version) if isinstance(version, str) else None


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
    name = clean_text(top.get("Name"))
    if name is None:
        return None
    return RocmAgent(
        name=name,
        marketing_name=clean_text(top.get("Marketing Name")),
        vendor=clean_text(top.get("Vendor Name")),
        device_type=clean_text(top.get("Device Type")),
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
    return HipInfo(version=clean_text(version), clang=clean_text(clang.group(0)) if clang else None)


def parse_first_line(text: str) -> str | None:
    """First non-empty line: ``/opt/rocm/.info/version``, DMI ``product_name`` and the like."""
    for line in text.splitlines():
        if line.strip():
            return clean_text(line)
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
        return clean_text(pretty)
    joined = " ".join(v for v in (values.get("NAME"), values.get("VERSION")) if v)
    return clean_text(joined)


def parse_cpuinfo(text: str) -> str | None:
    """The first ``model name`` of /proc/cpuinfo (``Model`` on some Arm kernels)."""
    fallback = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "model name" and value.strip():
            return clean_text(value)
        if key == "Model" and fallback is None and value.strip():
            fallback = value
    return clean_text(fallback)
