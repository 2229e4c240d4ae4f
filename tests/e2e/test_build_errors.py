"""A failed build's reason quotes the compiler's first error, before make's closing lines (which it leaves out).

Real tools on real sources where this machine has them (CMake with Unix Makefiles and gcc, nvcc, CMake's own
error); clang and hipcc (clang's driver) print gcc's format, and their lines are judged in the unit test of
``judging.builderror``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from gatekit import GateRun, Workspace

CMAKELISTS = "cmake_minimum_required(VERSION 3.10)\nproject(engine C)\nadd_executable(dflash_server main.c)\n"
BROKEN_C = "int main(void) {\n    return undeclared_value;\n}\n"


def _gate(ws: Workspace, command: str, files: dict[str, str]) -> GateRun:
    for name, text in files.items():
        (ws.root / name).write_text(text)
    config = ws.root / "ds4ci.toml"
    config.write_text(f'[build]\ncommand = "{command}"\ncwd = "."\ntimeout = 300\nserver_bin = "out/dflash_server"\n')
    run = ws.gate(widths="2", server_bin=None, config=config, timeout=400)
    assert run.code == 1, run.stdout + run.stderr
    assert run.results is not None and run.results["build"]["status"] == "fail"
    return run


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("make") and shutil.which("gcc")),
                    reason="needs cmake, make and gcc")
def test_a_gcc_error_under_cmake_and_make_is_quoted_first(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = _gate(ws, "cmake -S . -B out -G 'Unix Makefiles' -DCMAKE_C_COMPILER=gcc && cmake --build out",
                {"CMakeLists.txt": CMAKELISTS, "main.c": BROKEN_C})
    (reason,) = run.results["reasons"] if run.results else []
    head, _, rest = reason.partition("; first error: ")
    assert head.startswith("the build failed: exit "), reason
    quoted = rest.split("; last lines: ")[0]
    assert quoted.endswith("main.c:2:12: error: ‘undeclared_value’ undeclared (first use in this function)") or \
        quoted.endswith("main.c:2:12: error: 'undeclared_value' undeclared (first use in this function)"), reason
    log = (Path(run.results["evidence"]["dir"]) / "build" / "build.log").read_text()
    assert "gmake" in log and "***" in log  # make did print its closing lines ...
    assert "***" not in reason  # ... and the reason leaves them out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_an_nvcc_error_is_quoted_first(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = _gate(ws, "mkdir -p out && nvcc -c kernel.cu -o out/kernel.o",
                {"kernel.cu": "__global__ void k(int *p) { *p = undefined_x; }\n"})
    (reason,) = run.results["reasons"] if run.results else []
    assert 'first error: kernel.cu(1): error: identifier "undefined_x" is undefined' in reason, reason


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_a_cmake_error_is_quoted_with_its_message(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = _gate(ws, "cmake -S . -B out", {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.10)\nproject(engine NONE)\n"
                                                           'message(FATAL_ERROR "no ROCm toolchain found")\n'})
    (reason,) = run.results["reasons"] if run.results else []
    assert "first error: CMake Error at CMakeLists.txt:3 (message): no ROCm toolchain found" in reason, reason


def test_a_build_without_a_compiler_error_keeps_its_last_lines(tmp_path: Path) -> None:
    """No `error:` line: nothing is quoted as one; the last lines say what there is."""
    ws = Workspace.create(tmp_path)
    run = _gate(ws, f"{sys.executable} -c 'import sys; print(\\\"step one\\\"); sys.exit(4)'", {})
    (reason,) = run.results["reasons"] if run.results else []
    assert reason == "the build failed: exit 4; last lines: step one", reason
