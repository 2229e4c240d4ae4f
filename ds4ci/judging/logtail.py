"""What a reason quotes from a server's log: the lines that say what happened, within a size bound.

A server that dies mid-request usually prints its configuration first and the cause last
(``GGML_ASSERT(...) failed``, ``CUDA error``, a backtrace). A reason therefore quotes the lines that
look like an abort first, then the LAST lines of each stream, whole lines only, and never grows
past what ``results.json`` allows for one reason (``fit_reason``): a long log can never cost the
run its verdict.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path

# One reason in results.json is at most this many characters (the schema's "text").
REASON_LIMIT = 4096
_READ_BYTES = 64 * 1024  # how much of each stream's end is read for an excerpt
_LINE_CHARS = 300  # a longer line is shown with its end cut (it stays one line)
_ABORT_LINES = 3
_TAIL_LINES = 8
_EXCERPT_CHARS = 2400
_HEADLINE_CHARS = 200

ABORT = re.compile(
    r"GGML_ASSERT|GGML_ABORT|\babort(ed)?\b|ggml_abort|CUDA error|HIP error|hipError|cudaError|Segmentation fault"
    r"|SIGSEGV|SIGABRT|SIGBUS|core dumped|terminate called|out of memory|\bfatal\b|panic",
    re.IGNORECASE,
)
_BACKTRACE = re.compile(r"^\S*\(\S*\+0x[0-9a-f]+\)\[0x[0-9a-f]+\]$|^\s*#\d+\s+0x[0-9a-f]+")


# bubblewrap's own words when it cannot run the program it was given (not shown in the sandbox, not executable).
_EXEC_FAILURE = re.compile(r"^bwrap: (execvp .*|Can't find source path .*)$")


def exec_failure(paths: Sequence[Path]) -> str | None:
    """The line where the sandbox said it could not start the program, or None: that process never ran at all."""
    for path in paths:
        for line in _last_lines(path):
            if _EXEC_FAILURE.match(line):
                return line
    return None


def looks_like_abort(line: str) -> bool:
    """A line that says why a process died (a backtrace frame is not: it names ggml_abort, it does not explain)."""
    return bool(ABORT.search(line)) and not _BACKTRACE.search(line.strip())


def exit_description(code: int | None) -> str:
    """``code -6 (SIGABRT)`` for a signal exit, ``code 1`` otherwise."""
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"code {code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"code {code} (signal {-code})"
    return f"code {code}"


def _last_lines(path: Path) -> list[str]:
    try:
        with path.open("rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, end - _READ_BYTES))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if end > _READ_BYTES and lines:
        lines = lines[1:]  # the first line read is probably cut
    return [_short(line.rstrip()) for line in lines if line.strip()]


def _short(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…"


def explain(first: str, paths: Sequence[Path]) -> str:
    """``first`` + ``: <the last abort line>`` when there is one (the cause on the reason's first line), then the excerpt."""
    streams = [(path.stem, _last_lines(path)) for path in paths]
    aborts = [line for _, lines in streams for line in lines if looks_like_abort(line)]
    cause = f": {aborts[-1][:_HEADLINE_CHARS]}" if aborts else ""
    quoted = _excerpt(streams)
    return f"{first}{cause}\n{quoted}" if quoted else f"{first}{cause} (the server printed nothing)"


def excerpt(paths: Sequence[Path]) -> str:
    """Abort-looking lines first, then the last lines of each stream, labelled ``[stderr]``/``[stdout]``; "" when
    both are empty (nothing to quote)."""
    return _excerpt([(path.stem, _last_lines(path)) for path in paths])


def _excerpt(streams: list[tuple[str, list[str]]]) -> str:
    aborts = [f"[{name}] {line}" for name, lines in streams for line in lines if looks_like_abort(line)][-_ABORT_LINES:]
    parts: list[str] = []
    if aborts:
        parts += ["abort lines:", *aborts]
    for name, lines in streams:
        if lines:
            tail = lines[-_TAIL_LINES:]
            parts += [f"last {len(tail)} line(s) of {name}:", *(f"[{name}] {line}" for line in tail)]
    if not parts:
        return ""
    return fit_reason("\n".join(parts), _EXCERPT_CHARS)


def fit_reason(text: str, limit: int = REASON_LIMIT) -> str:
    """``text`` within ``limit`` characters: whole lines dropped from the middle, the first and abort lines kept."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    keep = [0] + [i for i, line in enumerate(lines) if i and looks_like_abort(line)]
    marker = "[… lines left out to fit …]"
    chosen = {i for i in keep}
    size = sum(len(lines[i]) + 1 for i in chosen) + len(marker) + 1
    for i in range(len(lines) - 1, 0, -1):  # then the last lines, as many as fit
        if i in chosen:
            continue
        if size + len(lines[i]) + 1 > limit:
            break
        chosen.add(i)
        size += len(lines[i]) + 1
    out: list[str] = []
    previous = -1
    for i in sorted(chosen):
        if i != previous + 1:
            out.append(marker)
        out.append(lines[i])
        previous = i
    result = "\n".join(out)
    if len(result) > limit:  # single huge lines: cut characters as the last resort
        result = result[: limit - 1] + "…"
    return result
