"""ds4ci.log: mode selection, workflow-command escaping, groups, heartbeat and byte progress."""

from __future__ import annotations

import io
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from ds4ci.errors import UsageError
from ds4ci.log import (
    HEARTBEAT_ENV,
    HEARTBEAT_S,
    ByteProgress,
    Logger,
    as_logger,
    escape_data,
    escape_property,
    file_growth,
    heartbeat_interval,
    human_bytes,
    human_rate,
)

ANSI = re.compile(r"\x1b\[")


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def plain(quiet: bool = False) -> tuple[Logger, io.StringIO]:
    out = io.StringIO()
    return Logger("plain", out, quiet=quiet, stamp=None), out


def actions() -> tuple[Logger, io.StringIO]:
    out = io.StringIO()
    return Logger("actions", out), out


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- mode selection -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tty", "env", "mode", "color"),
    [
        (False, {}, "plain", False),
        (True, {}, "terminal", True),
        (False, {"GITHUB_ACTIONS": "true"}, "actions", False),
        (True, {"GITHUB_ACTIONS": "true"}, "actions", False),
        (True, {"GITHUB_ACTIONS": "false"}, "terminal", True),
        (True, {"NO_COLOR": "1"}, "plain", False),
        (True, {"NO_COLOR": ""}, "terminal", True),  # no-color.org: only a non-empty value counts
        (True, {"TERM": "dumb"}, "plain", False),
        (True, {"TERM": "xterm-256color"}, "terminal", True),
        (False, {"DS4CI_LOG": "terminal"}, "terminal", True),
        (True, {"DS4CI_LOG": "plain"}, "plain", False),
        (False, {"DS4CI_LOG": "Actions "}, "actions", False),
        (True, {"DS4CI_LOG": "plain", "GITHUB_ACTIONS": "true"}, "plain", False),
        (False, {"DS4CI_LOG": "terminal", "NO_COLOR": "yes"}, "terminal", False),
        (False, {"DS4CI_LOG": "terminal", "TERM": "dumb"}, "terminal", False),
        (True, {"DS4CI_LOG": ""}, "terminal", True),
    ],
)
def test_mode_selection(tty: bool, env: dict[str, str], mode: str, color: bool) -> None:
    logger = Logger.from_env(FakeTTY() if tty else io.StringIO(), env)
    assert (logger.mode, logger.color) == (mode, color)


def test_invalid_forced_mode_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"DS4CI_LOG must be one of plain, actions, terminal; got 'fancy'"):
        Logger.from_env(io.StringIO(), {"DS4CI_LOG": "fancy"})


def test_from_env_defaults_to_sys_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    Logger.from_env(environ={"DS4CI_LOG": "plain"}).info("hello")
    assert capsys.readouterr().err.endswith("] hello\n")


def test_no_color_means_no_ansi_even_on_a_tty() -> None:
    out = FakeTTY()
    logger = Logger.from_env(out, {"NO_COLOR": "1", "DS4CI_LOG": "terminal"})
    logger.info("i")
    logger.warning("w", file="a.py", line=3)
    logger.error("e")
    with logger.group("g"):
        pass
    assert "w" in out.getvalue()
    assert not ANSI.search(out.getvalue())


def test_terminal_mode_colours_warnings_and_errors() -> None:
    out = FakeTTY()
    logger = Logger.from_env(out, {})
    logger.warning("careful")
    logger.error("broken")
    lines = out.getvalue().splitlines()
    assert "\x1b[33mwarning: careful\x1b[0m" in lines[0]
    assert "\x1b[1;31merror: broken\x1b[0m" in lines[1]


# -- lines ----------------------------------------------------------------------------------------------------------


def test_logger_is_a_progress_callback_with_a_timestamp() -> None:
    out = io.StringIO()
    logger = Logger("plain", out)
    logger("starting server")
    assert re.fullmatch(r"\[ds4ci \d\d:\d\d:\d\d\] starting server\n", out.getvalue())


def test_plain_warning_and_error_text() -> None:
    logger, out = plain()
    logger.warning("slow disk")
    logger.warning("odd value", file="cfg.toml", line=7)
    logger.error("no verdict", file="results.json", title="gate")
    assert out.getvalue() == "warning: slow disk\nwarning: odd value (cfg.toml:7)\nerror: gate: no verdict (results.json)\n"


def test_actions_escaping_is_exact() -> None:
    logger, out = actions()
    logger.warning("100% done\nnext\rline", file="dir/a:b,c.py", line=12, title="T: x, y")
    logger.error("plain: colons, commas stay")
    logger.warning("bare")
    assert out.getvalue().splitlines() == [
        "::warning file=dir/a%3Ab%2Cc.py,line=12,title=T%3A x%2C y::100%25 done%0Anext%0Dline",
        "::error::plain: colons, commas stay",
        "::warning::bare",
    ]


def test_escape_helpers() -> None:
    assert escape_data("%0A is 50%\r\n") == "%250A is 50%25%0D%0A"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


def test_actions_info_cannot_inject_a_workflow_command() -> None:
    logger, out = actions()
    logger.info("server said:\n::error::fake\n  ::add-mask::x")
    assert out.getvalue() == "server said:\n: :error: :fake\n  : :add-mask: :x\n"  # indentation kept
    assert not any(line.lstrip().startswith("::") for line in out.getvalue().splitlines())


def test_quiet_drops_info_but_keeps_warnings_and_errors() -> None:
    logger, out = plain(quiet=True)
    logger.info("chatter")
    logger("more chatter")
    logger.warning("w")
    logger.error("e")
    assert out.getvalue() == "warning: w\nerror: e\n"


def test_closed_stream_does_not_raise() -> None:
    logger, out = plain()
    out.close()
    logger.info("into the void")
    logger.error("still no exception")


# -- groups ---------------------------------------------------------------------------------------------------------


def test_actions_group_opens_and_closes() -> None:
    logger, out = actions()
    with logger.group("build 50%"):
        logger.info("inside")
    logger.info("after")
    assert out.getvalue() == "::group::build 50%25\ninside\n::endgroup::\nafter\n"


def test_actions_group_closes_on_exception() -> None:
    logger, out = actions()
    with pytest.raises(RuntimeError, match="boom"), logger.group("g"):
        raise RuntimeError("boom")
    logger.info("after")
    assert out.getvalue() == "::group::g\n::endgroup::\nafter\n"
    with logger.group("again"):  # the depth was restored: a fresh group is a real group
        pass
    assert out.getvalue().endswith("::group::again\n::endgroup::\n")


def test_actions_nested_groups_are_flattened() -> None:
    logger, out = actions()
    with logger.group("outer"):
        with logger.group("inner"):
            logger.info("x")
        logger.info("y")
    assert out.getvalue() == "::group::outer\n== inner\nx\ny\n::endgroup::\n"
    assert out.getvalue().count("::group::") == out.getvalue().count("::endgroup::") == 1


def test_plain_group_prints_headings() -> None:
    logger, out = plain()
    with logger.group("outer"), logger.group("inner"):
        logger.info("x")
    assert out.getvalue() == "== outer\n  == inner\nx\n"


# -- heartbeat ------------------------------------------------------------------------------------------------------


def test_heartbeat_prints_and_stops_at_exit(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * 100)
    logger, out = plain()
    clock = FakeClock()
    with logger.heartbeat("loading model", interval_s=0.05, detail=file_growth(log), clock=clock):
        clock.now += 45
        with log.open("ab") as f:
            f.write(b"y" * 2048)
        deadline = time.monotonic() + 10
        while "still" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    at_exit = out.getvalue()
    assert "still loading model: 45 s, log +2.0 KiB\n" in at_exit
    time.sleep(0.3)  # several intervals: nothing may appear after the block ended
    assert out.getvalue() == at_exit
    assert not [t for t in threading.enumerate() if t.name.startswith("ds4ci-heartbeat")]


def test_heartbeat_exit_is_prompt_even_with_a_long_interval() -> None:
    logger, out = plain()
    with logger.heartbeat("compiling", interval_s=3600):
        pass
    assert not [t for t in threading.enumerate() if t.name.startswith("ds4ci-heartbeat")]
    assert out.getvalue() == ""


def test_heartbeat_line_being_built_at_exit_is_dropped() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow_detail() -> str:
        entered.set()
        release.wait(10)
        return "late"

    logger, out = plain()
    with logger.heartbeat("slow", interval_s=0.01, detail=slow_detail):
        assert entered.wait(10)
    release.set()  # the beat now finishes building its line, after the block has ended
    for t in threading.enumerate():
        if t.name == "ds4ci-heartbeat-slow":
            t.join(10)
    assert out.getvalue() == ""


def test_heartbeat_survives_a_failing_detail_and_never_raises() -> None:
    def bad() -> str:
        raise OSError("gone")

    logger, out = plain()
    with logger.heartbeat("waiting", interval_s=0.05, detail=bad, clock=FakeClock()):
        deadline = time.monotonic() + 10
        while "still" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "still waiting: 0 s\n" in out.getvalue()


def test_heartbeat_does_not_swallow_the_callers_exception() -> None:
    logger, _ = plain()
    with pytest.raises(ValueError, match="mine"), logger.heartbeat("x", interval_s=0.05):
        raise ValueError("mine")


def test_file_growth_of_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    growth = file_growth(path, name="out")
    assert growth() == "out +0 B"
    path.write_bytes(b"z" * 3 * 1024 * 1024)
    assert growth() == "out +3.0 MiB"


# -- human units and byte progress ------------------------------------------------------------------------------------


def test_human_units() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1024) == "1.0 KiB"
    assert human_bytes(int(2.1 * 1024**2)) == "2.1 MiB"
    assert human_bytes(86 * 1024**3) == "86.0 GiB"
    assert human_bytes(5 * 1024**5) == "5120.0 TiB"
    assert human_rate(3 * 1024**3, 2.0) == "1.5 GiB/s"
    assert human_rate(10, 0) == "? B/s"


def test_byte_progress_is_rate_limited_by_the_clock() -> None:
    logger, out = plain()
    clock = FakeClock()
    gib = 1024**3
    bar = ByteProgress("hashing model.gguf", 86 * gib, logger, min_interval_s=5.0, clock=clock)
    bar.advance(gib)  # t=0: too soon
    clock.now += 4.9
    bar.advance(gib)  # still too soon
    assert out.getvalue() == ""
    clock.now += 0.1  # t=5
    bar.advance(int(10.4 * gib))
    clock.now += 1
    bar.advance(gib)  # 1 s after the last line: dropped
    clock.now += 5  # t=11
    bar.advance(0)
    bar.done()
    bar.done()  # only once
    bar.advance(gib)  # after done: counted, not printed
    assert out.getvalue().splitlines() == [
        "hashing model.gguf: 12.4 GiB of 86.0 GiB (14%), 2.5 GiB/s",
        "hashing model.gguf: 13.4 GiB of 86.0 GiB (15%), 1.2 GiB/s",
        "hashing model.gguf: done, 13.4 GiB in 11 s, 1.2 GiB/s",
    ]


def test_byte_progress_without_a_total() -> None:
    logger, out = plain()
    clock = FakeClock()
    bar = ByteProgress("downloading", None, logger, min_interval_s=1.0, clock=clock)
    clock.now += 2
    bar.advance(2048)
    assert out.getvalue() == "downloading: 2.0 KiB, 1.0 KiB/s\n"


def test_byte_progress_from_many_threads() -> None:
    logger, out = plain()
    bar = ByteProgress("hashing", 8 * 1000 * 4096, logger, min_interval_s=0.0)
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        for _ in range(1000):
            bar.advance(4096)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to expose a missing lock
    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    bar.done()
    assert bar.done_bytes == 8 * 1000 * 4096
    lines = out.getvalue().splitlines()
    assert len(lines) == 8 * 1000 + 1
    assert all(line.startswith("hashing: ") for line in lines)  # no torn or interleaved lines
    assert lines[-1].startswith("hashing: done, 31.2 MiB in ")
    assert "(100%)" in lines[-2]


def test_byte_progress_lines_never_go_backwards_across_threads() -> None:
    logger, out = plain()

    def yielding_clock() -> float:
        time.sleep(0)  # give another thread the chance to run between counting and printing
        return 0.0

    bar = ByteProgress("copy", None, logger, min_interval_s=0.0, clock=yielding_clock)

    def work() -> None:
        for _ in range(120):
            bar.advance(1024)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shown = [float(line.split()[1]) for line in out.getvalue().splitlines()]  # "copy: 12.0 KiB, ? B/s"
    assert shown == [float(k) for k in range(1, 961)]  # every count shown once, in order


# -- notices, actions-only annotations, callbacks and the heartbeat interval -----------------------------------------


def test_notice_is_an_annotation_under_actions_and_an_info_line_elsewhere() -> None:
    logger, out = actions()
    logger.notice("verdict PASS", title="ds4ci gate (sm90)")
    assert out.getvalue() == "::notice title=ds4ci gate (sm90)::verdict PASS\n"
    logger, out = plain()
    logger.notice("verdict PASS", title="gate")
    assert out.getvalue() == "gate: verdict PASS\n"


def test_annotate_writes_only_under_actions() -> None:
    logger, out = actions()
    logger.annotate("error", "bad key", file="ds4ci.toml", line=3, title="config")
    assert out.getvalue() == "::error file=ds4ci.toml,line=3,title=config::bad key\n"
    logger, out = plain()
    logger.annotate("error", "bad key", file="ds4ci.toml", line=3)
    assert out.getvalue() == ""


def test_as_logger_hands_each_line_to_a_callback_and_keeps_a_logger() -> None:
    lines: list[str] = []
    logger = as_logger(lines.append)
    with logger.group("q=3 server"):
        logger("ready")
        logger.warning("slow", file="stderr.log")
        logger.info("two\nlines")
    assert lines == ["== q=3 server", "ready", "warning: slow (stderr.log)", "two\nlines"]
    same, _ = actions()
    assert as_logger(same) is same
    as_logger(None).error("nowhere")  # no callback: silently dropped


@pytest.mark.parametrize(("value", "expected"), [(None, HEARTBEAT_S), ("", HEARTBEAT_S), ("0.25", 0.25), (" 30 ", 30.0)])
def test_heartbeat_interval_from_the_environment(value: str | None, expected: float) -> None:
    env = {} if value is None else {HEARTBEAT_ENV: value}
    assert heartbeat_interval(env) == expected
    assert Logger.from_env(io.StringIO(), {**env, "DS4CI_LOG": "plain"}).heartbeat_s == expected


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_heartbeat_interval_is_a_usage_error(value: str) -> None:
    with pytest.raises(UsageError, match="DS4CI_HEARTBEAT_S must be a positive number of seconds"):
        Logger.from_env(io.StringIO(), {HEARTBEAT_ENV: value})


def test_heartbeat_uses_the_loggers_interval_and_prefix() -> None:
    out = io.StringIO()
    logger = Logger("plain", out, stamp=None, heartbeat_s=0.01)
    with logger.heartbeat("loading", prefix="q=3: ", clock=FakeClock()):
        deadline = time.monotonic() + 10
        while "still" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert out.getvalue().splitlines()[0] == "q=3: still loading: 0 s"


def test_file_growth_adds_up_several_files(tmp_path: Path) -> None:
    err, out = tmp_path / "stderr.log", tmp_path / "stdout.log"
    err.write_bytes(b"e" * 10)
    growth = file_growth([err, out])
    err.write_bytes(b"e" * (10 + 1024))
    out.write_bytes(b"o" * 1024)
    assert growth() == "log +2.0 KiB"
