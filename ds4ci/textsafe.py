"""Text that came from a server (or any pull-request process) made safe to print on stdout or stderr.

A line printed in a GitHub Actions job is read by the runner as a workflow command in two forms (the runner's
``ActionCommand.TryParseV2`` and ``TryParse``, src/Runner.Common/ActionCommand.cs of actions/runner): a line
that starts with ``::`` once leading white space is trimmed (``::add-mask::x``, ``::stop-commands::tok``, an
annotation on any file), and the legacy ``##[command]data``, found *anywhere* in the line. Both look the
marker up with .NET's culture-sensitive ``StartsWith``/``IndexOf``, which skip characters that collate as
nothing (a soft hyphen, a zero-width joiner, a variation selector: :data:`IGNORABLE`), so ``#\u00ad#[`` is
``##[`` to the runner. Server text reaches the output inside reasons, log excerpts and table cells, so before
it is printed:

- every line separator but ``\\n`` is shown as an escape (``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``,
  ``\\u2028``, ``\\u2029``: everything ``str.splitlines`` splits on, and what the runner or a log viewer could
  break a line at), and so is every other control character but the tab (ANSI escapes included) and every
  bidirectional control (:data:`BIDI_CONTROLS`);
- every ``::``, wherever it stands in a line, gets a space between its colons (``: :``), and every ``##[``
  a space before its bracket (``## [``), ignorable characters between them or not: the text stays readable,
  and no printed line holds a marker of either form (a space is no white space the runner's trim takes past
  a marker, and it is not ignorable).

:func:`neutralise` is the one place this is done; every print of server-derived text goes through it.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import re
import sys
import threading
from typing import TextIO

# Every bidirectional control (marks, embeddings, overrides, isolates): each can make a reader see other text than
# what is there, so none passes from a server into a comment, a check run or a log line.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029{BIDI_CONTROLS}]")
# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties): what a culture-sensitive comparison may skip.
IGNORABLE = ("\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
             "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
             "\U000e0000-\U000e0fff")
_COLONS = re.compile(f":(?=[{IGNORABLE}]*:)")  # a colon another follows: a space after it
_LEGACY = re.compile(f"(#[{IGNORABLE}]*#[{IGNORABLE}]*)(?=\\[)")  # ``##`` a bracket follows: a space after it


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def neutralise(text: str) -> str:
    """``text`` with each line separator but ``\\n`` (and every other control but tab) escaped, and no ``::``
    or ``##[`` anywhere. Split the result on ``\\n`` only: it has no other separator."""
    return _LEGACY.sub(r"\1 ", _COLONS.sub(": ", _UNSAFE.sub(_escape, text)))


_SGR = re.compile(r"\x1b\[[0-9;]*m")  # a terminal colour: ESC [ digits m


def neutralise_keeping_colours(text: str) -> str:
    """:func:`neutralise`, but the terminal colours in ``text`` (``ESC [ ... m``, which the logger writes in
    colour mode) are kept: each piece between them is neutralised on its own, so no colour joins two halves of
    a command (its ``[...m`` stands between them)."""
    pieces, colours = _SGR.split(text), _SGR.findall(text)
    return neutralise(pieces[0]) + "".join(c + neutralise(p) for c, p in zip(colours, pieces[1:], strict=True))


def has_command(line: str) -> bool:
    """Whether the runner could read a workflow command in ``line`` (either form; see the module docstring)."""
    return bool(_COLONS.search(line) or _LEGACY.search(line))


def lines(text: str) -> list[str]:
    """The lines of ``text`` once :func:`neutralise`\\d (``[""]`` for an empty text)."""
    return neutralise(text).split("\n")


def json_text(text: str) -> str:
    """Serialised JSON with every ``::`` and ``##[`` written with a JSON escape (``:\\u003a``, ``##\\u005b``):
    the same document to a JSON reader, no workflow command to the runner. Outside its strings JSON holds
    neither, so only string contents change, and only in how they are spelled."""
    return text.replace("::", ":\\u003a").replace("##[", "##\\u005b")


class Guarded(io.TextIOBase):
    """A text stream that prints each line through :func:`neutralise` (``ds4ci``'s stdout and stderr).

    Lines go out whole: a line is held until its newline (or :meth:`finish`), so no two writes can meet in one
    printed line as a command neither held. On a terminal, which no runner reads, :meth:`flush` also prints the
    line begun (a prompt shows). Only :meth:`write_command`, the logger's own workflow commands, goes out as is.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self._held = ""
        self._lock = threading.RLock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.stream, "encoding", None) or "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.stream, "errors", None)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def write(self, text: str) -> int:
        with self._lock:
            done, sep, self._held = (self._held + text).rpartition("\n")
            if sep:
                self.stream.write(neutralise_keeping_colours(done) + "\n")
        return len(text)

    def write_command(self, line: str) -> None:
        """One workflow command of ds4ci's own, on a line of its own (its parts escaped by the caller)."""
        with self._lock:
            self._release()
            self.stream.write(line + "\n")
            self.stream.flush()

    def flush(self) -> None:
        with self._lock:
            if self._held and self.stream.isatty():
                self._release(newline=False)
            self.stream.flush()

    def _release(self, newline: bool = True) -> None:
        if self._held:
            self.stream.write(neutralise_keeping_colours(self._held) + ("\n" if newline else ""))
            self._held = ""

    def finish(self) -> None:
        """Print the line begun, if any, and flush (at exit)."""
        with self._lock:
            if self._held:
                self.stream.write(neutralise(self._held))
                self._held = ""
            self.stream.flush()


def guard_output() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` :class:`Guarded` streams for the rest of the process (the CLI's
    first step: a traceback the interpreter prints at the very end goes through them too); what is held is
    printed at exit."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Guarded):
            guarded = Guarded(stream)
            setattr(sys, name, guarded)
            atexit.register(_finish, guarded)


def _finish(stream: Guarded) -> None:
    with contextlib.suppress(OSError, ValueError):
        stream.finish()
