"""judging.builderror: the compiler's first error line of a failed build, in each toolchain's own words."""

from __future__ import annotations

import pytest

from ds4ci.judging import builderror, steps

MAKE_CLOSING = [
    "gmake[2]: *** [CMakeFiles/dflash_server.dir/build.make:76: CMakeFiles/dflash_server.dir/src/a.cpp.o] Error 1",
    "gmake[1]: *** [CMakeFiles/Makefile2:83: CMakeFiles/dflash_server.dir/all] Error 2",
    "gmake: *** [Makefile:91: all] Error 2",
]
CASES = {
    "gcc": (["[ 50%] Building CXX object CMakeFiles/dflash_server.dir/src/a.cpp.o",
             "/src/a.cpp: In function 'int main()':",
             "/src/a.cpp:12:5: error: 'undeclared' was not declared in this scope",
             "   12 |     undeclared = 1;", "/src/a.cpp:20:1: error: expected ';' before '}' token"],
            "/src/a.cpp:12:5: error: 'undeclared' was not declared in this scope"),
    "gcc fatal": (["In file included from /src/b.c:1:", "/src/b.h:3:10: fatal error: missing.h: No such file or directory"],
                  "/src/b.h:3:10: fatal error: missing.h: No such file or directory"),
    "clang": (["\x1b[1m/src/a.cpp:7:3: \x1b[0;1;31merror: \x1b[0m\x1b[1muse of undeclared identifier 'x'\x1b[0m"],
              "/src/a.cpp:7:3: error: use of undeclared identifier 'x'"),
    "clang linker": (["ld.lld: error: undefined symbol: foo()", "clang: error: linker command failed with exit code 1"],
                     "ld.lld: error: undefined symbol: foo()"),
    "hipcc": (["/src/k.hip:41:9: error: no matching function for call to 'hipLaunchKernelGGL'", "1 error generated"],
              "/src/k.hip:41:9: error: no matching function for call to 'hipLaunchKernelGGL'"),
    "nvcc": (['/src/k.cu(41): error: identifier "x" is undefined', "1 error detected in the compilation of \"k.cu\"."],
             '/src/k.cu(41): error: identifier "x" is undefined'),
    "gcc linker": (["/usr/bin/ld: a.o: in function `main':", "a.c:(.text+0x5): undefined reference to `foo'",
                    "collect2: error: ld returned 1 exit status"], "collect2: error: ld returned 1 exit status"),
    "CMake": (["-- Configuring incomplete, errors occurred!", "CMake Error at CMakeLists.txt:12 (find_package):",
               "  Could not find a package configuration file provided by \"hip\"", ""],
              'CMake Error at CMakeLists.txt:12 (find_package): Could not find a package configuration file provided by "hip"'),
}


@pytest.mark.parametrize(("lines", "expected"), list(CASES.values()), ids=list(CASES))
def test_the_first_error_is_the_compilers_not_makes(lines: list[str], expected: str) -> None:
    assert builderror.first_error([*lines, *MAKE_CLOSING]) == expected


def test_makes_closing_lines_alone_are_no_error() -> None:
    assert builderror.first_error([*MAKE_CLOSING, "ninja: build stopped: subcommand failed.", "FAILED: a.o"]) is None
    assert all(builderror.is_closing(line) for line in [*MAKE_CLOSING, "ninja: build stopped: subcommand failed."])
    assert not builderror.is_closing("/src/a.c:1:1: error: x")


def test_a_flag_named_werror_on_a_command_line_is_no_error() -> None:
    assert builderror.first_error(["/usr/bin/cc -Werror=format -Wall -c a.c -o a.o"]) is None


def test_the_reason_quotes_the_error_first_and_leaves_makes_lines_out() -> None:
    log = ["[ 50%] Building C object a.o", "/src/a.c:2:12: error: 'v' undeclared", "   2 |   return v;", *MAKE_CLOSING]
    build = {"status": "fail", "summary": f"the build failed: exit 2{steps.FIRST_ERROR}/src/a.c:2:12: error: 'v' undeclared",
             "log_tail": "\n".join(log) + "\n"}
    reason = steps.build_reason(build)  # type: ignore[arg-type]
    assert reason == ("the build failed: exit 2; first error: /src/a.c:2:12: error: 'v' undeclared; "
                      "last lines: [ 50%] Building C object a.o | 2 |   return v;")
