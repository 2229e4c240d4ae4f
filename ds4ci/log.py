"""One small CI-native logger for ds4ci's progress lines (stderr).

It writes in one of three modes, chosen once by :meth:`Logger.from_env`:

``actions``
    ``GITHUB_ACTIONS=true``. Warnings and errors become workflow commands (``::warning file=F,line=L::msg``) so
    they show up as annotations on the run and the pull request; groups become ``::group::``/``::endgroup::`` so a
    long gate log folds. Data and property values are escaped as the runner requires (``%``, CR, LF; property
    values also ``:`` and ``,``), and an info line that would itself read as a command is defused. No timestamps:
    the runner stamps every line.
``terminal``
    A TTY, with neither ``NO_COLOR`` (any non-empty value, no-color.org) nor ``TERM=dumb``: the plain text with
    ANSI colour for warnings, errors and headings.
``plain``
    Anything else (pipes, files, other CI): ``[ds4ci HH:MM:SS] message`` lines, ``warning: …``/``error: …``.

``DS4CI_LOG=plain|actions|terminal`` forces a mode (colour still never appears with ``NO_COLOR`` or ``TERM=dumb``).
A :class:`Logger` is callable with one string, so it drops in wherever a ``Progress = Callable[[str], None]``
callback is taken, and :func:`as_logger` turns such a callback back into a Logger; ``quiet=True`` keeps only
warnings and errors (for ``--json`` runs). :meth:`Logger.heartbeat` keeps a long silent step visibly alive (every
``DS4CI_HEARTBEAT_S`` seconds, default 15); :class:`ByteProgress` reports hashing/transfer.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal, TextIO, cast

from ds4ci.errors import UsageError
from ds4ci.textsafe import neutralise

Mode = Literal["plain", "actions", "terminal"]
MODES: tuple[Mode, ...] = ("plain", "actions", "terminal")
_ANSI = {"warning": "\x1b[33m", "error": "\x1b[1;31m", "heading": "\x1b[1m", "stamp": "\x1b[2m"}
_RESET = "\x1b[0m"
HEARTBEAT_S = 15.0  # seconds between "still ..." lines of a long silent step
HEARTBEAT_ENV = "DS4CI_HEARTBEAT_S"  # overrides HEARTBEAT_S (a positive number of seconds)
Progress = Callable[[str], None]


def heartbeat_interval(env: Mapping[str, str]) -> float:
    """``DS4CI_HEARTBEAT_S`` if set (a positive number), else :data:`HEARTBEAT_S`; anything else is a UsageError."""
    raw = env.get(HEARTBEAT_ENV, "").strip()
    if not raw:
        return HEARTBEAT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise UsageError(f"{HEARTBEAT_ENV} must be a positive number of seconds; got {env[HEARTBEAT_ENV]!r}")
    return value


def escape_data(text: str) -> str:
    """Escape a workflow-command message (the part after the second ``::``): ``%``, CR and LF as the runner
    requires, then every other line separator and control (:func:`~ds4ci.textsafe.neutralise`)."""
    return neutralise(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (``file=``, ``title=`` ...)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def human_bytes(n: float) -> str:
    """``512 B``, ``2.1 MiB``, ``86.0 GiB`` (binary units; negative sizes keep their sign)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def human_rate(n_bytes: float, seconds: float) -> str:
    """Throughput such as ``1.9 GiB/s``; ``? B/s`` when no time has passed."""
    return f"{human_bytes(n_bytes / seconds)}/s" if seconds > 0 else "? B/s"


def human_seconds(seconds: float) -> str:
    """``45 s`` below two minutes, then ``12 min 05 s``."""
    s = max(0, round(seconds))
    return f"{s} s" if s < 120 else f"{s // 60} min {s % 60:02d} s"


def file_growth(paths: Path | Sequence[Path], name: str = "log") -> Callable[[], str]:
    """A heartbeat ``detail``: how much *paths* grew together since this call, e.g. ``log +2.1 MiB``."""
    files = [paths] if isinstance(paths, Path) else list(paths)

    def size() -> int:
        total = 0
        for path in files:
            with contextlib.suppress(OSError):
                total += path.stat().st_size
        return total

    start = size()
    return lambda: f"{name} +{human_bytes(size() - start)}"


def _default_stamp() -> str:
    return f"[ds4ci {time.strftime('%H:%M:%S')}]"


class Logger:
    """Writes progress, warnings, errors and groups to one stream; safe to use from several threads."""

    def __init__(
        self,
        mode: Mode,
        stream: TextIO,
        *,
        quiet: bool = False,
        color: bool | None = None,
        stamp: Callable[[], str] | None = _default_stamp,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.mode = mode
        self.heartbeat_s = heartbeat_s
        self.stream = stream
        self.quiet = quiet
        self.color = (mode == "terminal") if color is None else color
        self._stamp = stamp if mode != "actions" else None
        self._lock = threading.RLock()
        self._depth = 0

    @classmethod
    def from_env(cls, stream: TextIO | None = None, environ: Mapping[str, str] | None = None, *, quiet: bool = False) -> Logger:
        """Pick the mode and heartbeat interval from the environment (see the module docstring).

        A bad ``DS4CI_LOG`` or ``DS4CI_HEARTBEAT_S`` is a UsageError.
        """
        stream = sys.stderr if stream is None else stream
        env = os.environ if environ is None else environ
        no_color = bool(env.get("NO_COLOR")) or env.get("TERM") == "dumb"
        forced = env.get("DS4CI_LOG", "").strip().lower()
        mode: Mode
        if forced:
            if forced not in MODES:
                raise UsageError(f"DS4CI_LOG must be one of {', '.join(MODES)}; got {env['DS4CI_LOG']!r}")
            mode = next(m for m in MODES if m == forced)
        elif env.get("GITHUB_ACTIONS") == "true":
            mode = "actions"
        else:
            isatty = getattr(stream, "isatty", None)
            mode = "terminal" if callable(isatty) and isatty() and not no_color else "plain"
        color = mode == "terminal" and not no_color
        return cls(mode, stream, quiet=quiet, color=color, heartbeat_s=heartbeat_interval(env))

    # -- output ---------------------------------------------------------------------------------------------------

    def _paint(self, kind: str, text: str) -> str:
        return f"{_ANSI[kind]}{text}{_RESET}" if self.color else text

    def _write(self, text: str, *, stamped: bool = True, command: bool = False) -> None:
        if stamped and self._stamp is not None:
            text = f"{self._paint('stamp', self._stamp())} {text}"
        own = getattr(self.stream, "write_command", None) if command else None  # a textsafe.Guarded stream's
        with self._lock:
            try:
                if callable(own):
                    own(text)
                else:
                    self.stream.write(text + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # a closed or broken stream must not take the gate down
                pass

    def __call__(self, message: str) -> None:
        """Same as :meth:`info`: a Logger is a ``Progress`` callback."""
        self.info(message)

    def info(self, message: str) -> None:
        if self.quiet:
            return
        self._write(neutralise(message))  # in every mode: stderr may reach a job's log however it is written

    def warning(self, message: str, file: str | None = None, line: int | None = None, title: str | None = None) -> None:
        self._annotate("warning", message, file, line, title)

    def error(self, message: str, file: str | None = None, line: int | None = None, title: str | None = None) -> None:
        self._annotate("error", message, file, line, title)

    def notice(self, message: str, file: str | None = None, line: int | None = None, title: str | None = None) -> None:
        """A notice annotation under Actions (e.g. a passing verdict); an ordinary info line elsewhere."""
        if self.mode == "actions":
            self._command("notice", message, file, line, title)
        else:
            self.info(f"{title}: {message}" if title else message)

    def annotate(
        self, kind: Literal["error", "warning", "notice"], message: str, file: str | None = None,
        line: int | None = None, title: str | None = None,
    ) -> None:
        """Only under Actions: an annotation for something the caller reports in its own words anyway."""
        if self.mode == "actions":
            self._command(kind, message, file, line, title)

    def _command(self, kind: str, message: str, file: str | None, line: int | None, title: str | None) -> None:
        props = [f"{k}={escape_property(str(v))}" for k, v in (("file", file), ("line", line), ("title", title)) if v is not None]
        self._write(f"::{kind}{' ' + ','.join(props) if props else ''}::{escape_data(message)}", stamped=False,
                    command=True)

    def _annotate(self, kind: str, message: str, file: str | None, line: int | None, title: str | None) -> None:
        if self.mode == "actions":
            self._command(kind, message, file, line, title)
            return
        where = f" ({file}{'' if line is None else f':{line}'})" if file is not None else ""
        self._write(self._paint(kind, neutralise(f"{kind}: {f'{title}: ' if title else ''}{message}{where}")))

    @contextlib.contextmanager
    def group(self, title: str) -> Iterator[None]:
        """A foldable section in Actions (always closed, also on error); a heading line elsewhere.

        Actions cannot nest groups, so an inner group is flattened into a heading line inside the open one.
        """
        with self._lock:
            depth, self._depth = self._depth, self._depth + 1
        try:
            if self.mode == "actions" and depth == 0:
                self._write(f"::group::{escape_data(title)}", stamped=False, command=True)
            elif not self.quiet:
                self._write(self._paint("heading", neutralise(f"{'  ' * depth if self.mode != 'actions' else ''}== {title}")))
            yield
        finally:
            with self._lock:
                self._depth -= 1
            if self.mode == "actions" and depth == 0:
                self._write("::endgroup::", stamped=False, command=True)

    @contextlib.contextmanager
    def heartbeat(
        self,
        label: str,
        interval_s: float | None = None,
        detail: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        prefix: str = "",
    ) -> Iterator[None]:
        """Every *interval_s* (default: the logger's ``heartbeat_s``) print ``<prefix>still <label>: 45 s`` (plus
        ``, <detail()>``) until the block exits.

        A daemon thread waits on an Event, so exit is prompt; the stop flag is set under the write lock, so no line
        appears after exit. A failing *detail* is left out of the line; nothing is raised into the caller.
        """
        stop = threading.Event()
        start = clock()
        every = self.heartbeat_s if interval_s is None else interval_s

        def beat() -> None:
            while not stop.wait(every):
                try:
                    text = f"{prefix}still {label}: {human_seconds(clock() - start)}"
                    with contextlib.suppress(Exception):
                        text += f", {detail()}" if detail is not None else ""
                    with self._lock:
                        if stop.is_set():
                            return
                        self.info(text)
                except Exception:  # never let the heartbeat print a traceback into the log
                    return

        thread = threading.Thread(target=beat, name=f"ds4ci-heartbeat-{label}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            with self._lock:
                stop.set()
            thread.join(timeout=1.0)  # a detail() stuck on a slow disk must not hold the caller up for long


class ByteProgress:
    """Thread-safe progress of a byte count: ``hashing model.gguf: 12.4 GiB of 86.0 GiB (14%), 1.9 GiB/s``.

    ``advance`` prints at most once per *min_interval_s*; ``done`` prints the total and the average rate once.
    """

    def __init__(
        self,
        label: str,
        total_bytes: int | None,
        logger: Logger,
        min_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total_bytes, self.logger = label, total_bytes, logger
        self.min_interval_s, self._clock = min_interval_s, clock
        self.done_bytes = 0
        self._start = self._last = clock()
        self._finished = False
        self._lock = threading.Lock()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done_bytes += n
            now = self._clock()
            if self._finished or now - self._last < self.min_interval_s:
                return
            self._last = now
            of = ""
            if self.total_bytes:
                of = f" of {human_bytes(self.total_bytes)} ({100 * self.done_bytes // self.total_bytes}%)"
            self.logger.info(
                f"{self.label}: {human_bytes(self.done_bytes)}{of}, {human_rate(self.done_bytes, now - self._start)}"
            )

    def done(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            elapsed = self._clock() - self._start
            self.logger.info(
                f"{self.label}: done, {human_bytes(self.done_bytes)} in {human_seconds(elapsed)},"
                f" {human_rate(self.done_bytes, elapsed)}"
            )


class _CallbackStream(io.TextIOBase):
    """A text stream that hands each line the Logger writes to a ``Progress`` callback."""

    def __init__(self, callback: Progress) -> None:
        super().__init__()
        self._callback = callback

    def write(self, text: str) -> int:
        self._callback(text[:-1] if text.endswith("\n") else text)
        return len(text)


def as_logger(progress: Progress | Logger | None) -> Logger:
    """*progress* itself if it is a Logger; else a plain, unstamped Logger whose lines go to the callback
    (or nowhere for None), so code that takes either can use groups, warnings and heartbeats alike."""
    if isinstance(progress, Logger):
        return progress
    callback: Progress = progress if progress is not None else (lambda _line: None)
    return Logger("plain", cast(TextIO, _CallbackStream(callback)), stamp=None)
