"""The line that says why a build failed: the compiler's first error, not make's closing lines.

A failed build's log ends with the build tool's own lines (``gmake[2]: *** [CMakeFiles/x.dir/build.make:76:
x.o] Error 1``, ``gmake: *** [Makefile:91: all] Error 2``, ``ninja: build stopped: subcommand failed.``),
which say only that something failed. What failed is the first diagnostic of the tool that stopped:

- gcc, clang and hipcc (clang's driver): ``src/a.cpp:12:5: error: ...``, ``... fatal error: ...``,
  ``clang: error: ...``, ``collect2: error: ld returned 1 exit status``;
- nvcc: ``kernels/k.cu(41): error: identifier "x" is undefined``;
- CMake: ``CMake Error at CMakeLists.txt:7 (message):``, quoted with its first message line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# " error: " after a location (file:line:col, file(line)), a tool's name, or at the start of the line.
_COMPILER = re.compile(r"(?:^|[:)\s])(?:fatal )?error:\s")
_CMAKE = re.compile(r"^CMake Error\b")
# make's and ninja's own lines: what they say follows from the error, never the error itself.
_CLOSING = re.compile(r"^(?:g?make(?:\[\d+\])?: \*\*\*|ninja: build stopped)")
MAX_QUOTE = 240


def _shown(line: str) -> str:
    return line if len(line) <= MAX_QUOTE else line[: MAX_QUOTE - 1] + "…"


def first_error(lines: Sequence[str]) -> str | None:
    """The first compiler or CMake error line of a build's output (colours stripped, shortened), or None."""
    clean = [_ANSI.sub("", line).rstrip() for line in lines]
    for index, line in enumerate(clean):
        text = line.strip()
        if _CLOSING.match(text):
            continue
        if _CMAKE.match(text):
            message = next((m.strip() for m in clean[index + 1 : index + 4] if m.strip()), "")
            return _shown(f"{text} {message}" if message else text)
        if _COMPILER.search(text):
            return _shown(text)
    return None


def is_closing(line: str) -> bool:
    """Whether a line is make's or ninja's closing line (``gmake: *** ...``, ``ninja: build stopped``)."""
    return _CLOSING.match(_ANSI.sub("", line).strip()) is not None
