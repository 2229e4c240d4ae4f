"""Text that came from a server (or any pull-request process) made safe to print on stdout or stderr.

A line printed in a GitHub Actions job is read by the runner: one that starts with ``::`` is a workflow
command (an annotation on any file, ``::stop-commands::``, ``::add-mask::``). Server text reaches the output
inside reasons, log excerpts and table cells, so before it is printed:

- every line separator but ``\\n`` is shown as an escape (``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``,
  ``\\u2028``, ``\\u2029``: everything ``str.splitlines`` splits on, and what the runner or a log viewer could
  break a line at), and so is every other control character but the tab (ANSI escapes included) and every
  bidirectional control (:data:`BIDI_CONTROLS`);
- a line whose first non-blank characters are ``::`` gets a space between them (``: :``), so no printed
  line starts a workflow command.

:func:`neutralise` is the one place this is done; every print of server-derived text goes through it.
"""

from __future__ import annotations

import re

# Every bidirectional control (marks, embeddings, overrides, isolates): each can make a reader see other text than
# what is there, so none passes from a server into a comment, a check run or a log line.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029{BIDI_CONTROLS}]")
_COMMAND = re.compile(r"^([ \t]*):(?=:)", re.MULTILINE)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def neutralise(text: str) -> str:
    """``text`` with each line separator but ``\\n`` (and every other control but tab) escaped, and no line
    starting with ``::``. Split the result on ``\\n`` only: it has no other separator."""
    return _COMMAND.sub(r"\1: ", _UNSAFE.sub(_escape, text))


def lines(text: str) -> list[str]:
    """The lines of ``text`` once :func:`neutralise`\\d (``[""]`` for an empty text)."""
    return neutralise(text).split("\n")
