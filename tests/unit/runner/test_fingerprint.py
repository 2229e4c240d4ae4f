"""Fingerprint parsers on real captured output (tests/data/fingerprint/SOURCES.md says whence)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from paths import TESTS

from ds4ci.evidence import results
from ds4ci.runner.fingerprint import HostFiles, assemble, assess_health, collect
from ds4ci.runner.hostinfo import (
    NvidiaGpu,
    parse_cpuinfo,
    parse_cuda_version_json,
    parse_first_line,
    parse_hipconfig,
    parse_nvcc_version,
    parse_nvidia_smi_csv,
    parse_os_release,
    parse_rocminfo,
)
from ds4ci.runner.probes import ProbeResult

DATA = TESTS / "data" / "fingerprint"
H200 = DATA / "nvidia-h200"
GFX = DATA / "gfx1151"
HIP = DATA / "hip"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def from_marker(text: str, marker: str) -> str:
    """The part of an excerpt from the first line containing ``marker`` on."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if marker in line)
    return "".join(lines[start:])


def strix_halo_rocminfo() -> str:
    """A whole rocminfo output composed from real excerpts, in rocminfo's own order."""
    return (
        read(GFX / "rocminfo-rocm-5853-header-agent1.txt")
        + read(GFX / "rocminfo-ds4-475-agent2.txt")
        + from_marker(read(GFX / "rocminfo-therock-1881-gpu-middle.txt"), "BDFID:")
        + read(GFX / "rocminfo-rocm-libraries-4618-gpu-pools.txt")
    )


def fingerprint_validator() -> jsonschema.Draft202012Validator:
    full = results.schema()
    sub = {**full["properties"]["fingerprint"], "$defs": full["$defs"]}
    return jsonschema.Draft202012Validator(sub)


def ok(name: str, stdout: str) -> ProbeResult:
    return ProbeResult(name, "ok", stdout, "", 0, 0.01, "exit 0")


def missing(name: str) -> ProbeResult:
    return ProbeResult(name, "missing", "", "", None, 0.0, f"{name} not found on PATH")


# --- NVIDIA (captured on the H200) ------------------------------------------------------------


def test_nvidia_smi_query_row_is_parsed_with_units_arch_and_driver() -> None:
    gpus = parse_nvidia_smi_csv(read(H200 / "nvidia-smi-query-noheader.csv"))
    assert gpus == [NvidiaGpu(name="NVIDIA H200", driver="580.159.04", memory_mib=143771, compute_cap="9.0")]
    assert gpus[0].arch == "sm_90"


def test_nvidia_smi_error_text_yields_no_gpu_rather_than_junk() -> None:
    # nvidia-smi prints prose instead of rows when it sees no device; that must not become a GPU.
    assert parse_nvidia_smi_csv("No devices were found\n") == []


def test_nvidia_smi_not_available_fields_become_none() -> None:
    row = read(H200 / "nvidia-smi-query-noheader.csv").replace("9.0", "[N/A]").replace("143771", "[N/A]")
    (gpu,) = parse_nvidia_smi_csv(row)
    assert (gpu.compute_cap, gpu.memory_mib, gpu.arch) == (None, None, None)


def test_nvcc_version_is_the_full_toolkit_release() -> None:
    assert parse_nvcc_version(read(H200 / "nvcc-version.txt")) == "13.0.88"
    assert parse_nvcc_version("nvcc: command not found") is None


def test_cuda_version_json_malformed_is_none() -> None:
    assert parse_cuda_version_json("not json") is None
    assert parse_cuda_version_json("[]") is None


def test_os_release_pretty_name_is_unquoted() -> None:
    assert parse_os_release(read(H200 / "os-release.txt")) == "Ubuntu 24.04.3 LTS"


def test_cpuinfo_model_name() -> None:
    assert parse_cpuinfo(read(H200 / "cpuinfo-model.txt")) == "Intel(R) Xeon(R) Processor"
    assert parse_cpuinfo("processor\t: 0\n") is None


# --- AMD gfx1151 (quoted in public issue threads) ---------------------------------------------


def test_rocminfo_finds_the_gfx1151_agent_and_not_the_cpu_named_after_the_radeon() -> None:
    info = parse_rocminfo(strix_halo_rocminfo())
    assert [a.device_type for a in info.agents] == ["CPU", "GPU"]
    assert info.agents[0].name == "AMD RYZEN AI MAX+ 395 w/ Radeon 8060S"
    (gpu,) = info.gpus
    assert gpu.name == "gfx1151"
    assert gpu.marketing_name == "AMD Radeon 8060S Graphics"
    assert gpu.vendor == "AMD"
    assert gpu.compute_units == 40
    assert gpu.memory_mib == 61700860 // 1024  # Pool 1, GLOBAL segment, KB
    assert info.kernel_driver is None  # this header says only "ROCk module is loaded"


def test_rocminfo_marketing_name_varies_between_rocm_versions_but_arch_does_not() -> None:
    a = parse_rocminfo(read(GFX / "rocminfo-ds4-475-agent2.txt")).gpus[0]
    b = parse_rocminfo(read(GFX / "rocminfo-voicestudio-1274-agent2.txt")).gpus[0]
    assert (a.name, b.name) == ("gfx1151", "gfx1151")
    assert a.marketing_name == "AMD Radeon 8060S Graphics"
    assert b.marketing_name == "AMD Radeon(TM) 8060S Graphics"


def test_rocminfo_kernel_driver_version_from_newer_header() -> None:
    text = read(GFX / "rocminfo-jax-234-header.txt") + read(GFX / "rocminfo-ds4-475-agent2.txt")
    assert parse_rocminfo(text).kernel_driver == "6.16.6"


def test_rocminfo_header_only_has_no_agents() -> None:
    info = parse_rocminfo(read(GFX / "rocminfo-rocm-libraries-4618-header.txt"))
    assert info.agents == ()
    assert info.gpus == ()


def test_hipconfig_full_rocm_6() -> None:
    hip = parse_hipconfig(read(HIP / "hipconfig-full-rocm-6.2-hip-3521.txt"))
    assert hip.version == "6.2.41133-dd7f95766"
    assert hip.clang is not None
    assert hip.clang.startswith("AMD clang version 18.0.0git (")


def test_hipconfig_full_old_layout() -> None:
    hip = parse_hipconfig(read(HIP / "hipconfig-full-rocm-3.10-hip-examples-23.txt"))
    assert hip.version == "3.10.20465-f9876b8d"
    assert hip.clang is not None
    assert hip.clang.startswith("clang version 12.0.0 (")


def test_hipconfig_bare_version_output() -> None:
    # `hipconfig --version` prints the same value as the --full header, bare and without newline.
    bare = read(HIP / "hipconfig-full-rocm-6.2-hip-3521.txt").splitlines()[0].split(":", 1)[1].strip()
    assert parse_hipconfig(bare).version == "6.2.41133-dd7f95766"
    assert parse_hipconfig("hipconfig: error\nsomething").version is None


def test_first_line_skips_blank_and_strips() -> None:
    assert parse_first_line("\n  Framework Desktop \n") == "Framework Desktop"
    assert parse_first_line("\n\n") is None


# --- health and assembly --------------------------------------------------------------------


def nvidia_box() -> dict[str, ProbeResult]:
    return {
        "nvidia-smi": ok("nvidia-smi", read(H200 / "nvidia-smi-query-noheader.csv")),
        "rocminfo": missing("rocminfo"),
        "nvcc": ok("nvcc", read(H200 / "nvcc-version.txt")),
        "os-release": ok("os-release", read(H200 / "os-release.txt")),
        "cpuinfo": ok("cpuinfo", read(H200 / "cpuinfo-model.txt")),
        "dmi-product": missing("dmi-product"),
    }


def amd_box() -> dict[str, ProbeResult]:
    return {
        "nvidia-smi": missing("nvidia-smi"),
        "rocminfo": ok(
            "rocminfo", read(GFX / "rocminfo-jax-234-header.txt") + read(GFX / "rocminfo-voicestudio-1274-agent2.txt")
        ),
        "hipconfig": ok("hipconfig", read(HIP / "hipconfig-full-rocm-6.2-hip-3521.txt")),
    }


def test_assembled_h200_fingerprint_matches_schema_and_facts() -> None:
    fp = assemble(nvidia_box())
    fingerprint_validator().validate(fp)
    assert fp["gpus"] == [
        {"vendor": "nvidia", "name": "NVIDIA H200", "arch": "sm_90", "memory_mib": 143771, "driver": "580.159.04"}
    ]
    assert fp["health"]["status"] == "ok"
    assert fp["toolchain"]["cuda_toolkit"] == "13.0.88"
    assert fp["toolchain"]["nvidia_driver"] == "580.159.04"
    assert fp["host"]["os"] == "Ubuntu 24.04.3 LTS"
    assert fp["host"]["host_model"] is None
    assert fp["probes"]["rocminfo"] == "missing"
    assert fp["probes"]["dmi-product"] == "missing"


def test_assembled_gfx1151_fingerprint_matches_schema_and_facts() -> None:
    fp = assemble(amd_box())
    fingerprint_validator().validate(fp)
    (gpu,) = fp["gpus"]
    assert gpu["vendor"] == "amd"
    assert gpu["arch"] == "gfx1151"
    assert gpu["name"] == "AMD Radeon(TM) 8060S Graphics"
    assert gpu["driver"] == "6.16.6"
    assert fp["toolchain"]["hip"] == "6.2.41133-dd7f95766"
    assert fp["toolchain"]["amdgpu_driver"] == "6.16.6"
    assert fp["health"]["status"] == "ok"
    assert "gfx1151" in fp["health"]["detail"]


def test_health_unknown_without_gpu_tools() -> None:
    status, detail = assess_health({"nvidia-smi": missing("nvidia-smi"), "rocminfo": missing("rocminfo")})
    assert status == "unknown"
    assert "no GPU tool" in detail


def test_health_unhealthy_when_rocminfo_lists_only_the_cpu() -> None:
    probes = {"rocminfo": ok("rocminfo", read(GFX / "rocminfo-rocm-5853-header-agent1.txt"))}
    status, detail = assess_health(probes)
    assert status == "unhealthy"
    assert "no GPU agent" in detail


def test_health_unhealthy_when_a_gpu_tool_fails() -> None:
    failed = ProbeResult("nvidia-smi", "failed", "", "driver gone", 9, 0.1, "nvidia-smi: exit 9: driver gone")
    status, detail = assess_health({"nvidia-smi": failed})
    assert status == "unhealthy"
    assert "exit 9" in detail


def test_health_timeout_wins_over_a_healthy_gpu() -> None:
    probes = nvidia_box()
    probes["rocminfo"] = ProbeResult("rocminfo", "timeout", "", "", None, 2.0, "rocminfo did not answer; killed")
    fp = assemble(probes)
    fingerprint_validator().validate(fp)
    assert fp["health"]["status"] == "timeout"
    assert "rocminfo" in fp["health"]["detail"]
    assert fp["gpus"][0]["name"] == "NVIDIA H200"  # what is known is still reported


def test_long_values_are_cut_to_the_schema_text_limit() -> None:
    long_name = "X" * 5000
    probes = {"nvidia-smi": ok("nvidia-smi", f"{long_name}, 580.159.04, 143771, 9.0\n")}
    fp = assemble(probes)
    fingerprint_validator().validate(fp)
    assert len(fp["gpus"][0]["name"]) == 4096


def test_collect_reads_host_files_and_records_missing_ones(tmp_path: Path) -> None:
    files = HostFiles(
        os_release=H200 / "os-release.txt",
        cpuinfo=H200 / "cpuinfo-model.txt",
        dmi_product=tmp_path / "absent-product",
        dmi_vendor=tmp_path / "absent-vendor",
        amdgpu_version=tmp_path / "absent-amdgpu",
    )
    env = {"PATH": str(tmp_path / "empty-bin"), "ROCM_PATH": str(tmp_path / "rocm"), "CUDA_HOME": str(tmp_path / "cuda")}
    fp, raw = collect(5.0, env=env, files=files)
    fingerprint_validator().validate(fp)
    assert fp["host"]["os"] == "Ubuntu 24.04.3 LTS"
    assert fp["host"]["cpu"] == "Intel(R) Xeon(R) Processor"
    assert fp["host"]["host_model"] is None
    expected_missing = {"nvidia-smi", "rocminfo", "hipconfig", "nvcc", "rocm-version-file", "cuda-version-json",
                        "amdgpu-module-version", "dmi-product", "dmi-vendor"}
    assert {k for k, v in fp["probes"].items() if v == "missing"} == expected_missing
    assert fp["health"]["status"] == "unknown"
    assert raw["os-release"].status == "ok"


@pytest.mark.parametrize("bad", [{"gpus": [], "health": {"status": "fine", "detail": ""}}])
def test_validator_really_rejects_off_schema_objects(bad: dict[str, Any]) -> None:
    # Guards the helper above: a validator that accepted anything would make the schema tests vacuous.
    with pytest.raises(jsonschema.ValidationError):
        fingerprint_validator().validate(bad)


def test_background_hands_over_the_fingerprint_or_exactly_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from ds4ci.runner import fingerprint as fp_module

    taken: list[tuple[float, Any]] = []

    def fake(deadline_s: float = 20.0, progress: Any = None) -> dict[str, Any]:
        taken.append((deadline_s, progress))
        return {"gpus": []}

    monkeypatch.setattr(fp_module, "fingerprint", fake)
    say = print
    assert fp_module.Background(5.0, say).result() == {"gpus": []}
    assert taken == [(5.0, say)]

    boom = OSError(28, "No space left on device")

    def broken(*_args: object) -> dict[str, Any]:
        raise boom

    monkeypatch.setattr(fp_module, "fingerprint", broken)
    pending = fp_module.Background()
    with pytest.raises(OSError) as raised:
        pending.result()
    assert raised.value is boom
