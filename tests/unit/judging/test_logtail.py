"""Reasons that quote a log: abort lines first, the last lines, whole lines, within the schema's bound."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ds4ci.judging.logtail import REASON_LIMIT, excerpt, exit_description, fit_reason, looks_like_abort

CRASH = Path(__file__).resolve().parents[2] / "data" / "real-server" / "h200-q2-crash.stderr.log"


def test_the_real_crash_quotes_the_assert_first_and_the_backtrace_end_last(tmp_path: Path) -> None:
    stderr, stdout = tmp_path / "stderr.log", tmp_path / "stdout.log"
    stderr.write_bytes(CRASH.read_bytes())
    stdout.write_bytes(b"")
    text = excerpt([stderr, stdout])
    lines = text.splitlines()
    assert lines[0] == "abort lines:"
    assert "GGML_ASSERT(offset + size <= ggml_nbytes(tensor)" in lines[1]
    assert len([line for line in lines if "GGML_ASSERT" in line]) == 1  # the backtrace frames are not abort lines
    assert lines[-1].endswith("libc.so.6(+0x129ecc)[0x7f449f129ecc]")
    assert "Configuration" not in text and "stdout" not in text


def test_abort_lines() -> None:
    for line in ("GGML_ASSERT(x) failed", "CUDA error: an illegal memory access", "Segmentation fault (core dumped)",
                 "terminate called after throwing an instance of 'std::bad_alloc'", "Aborted"):
        assert looks_like_abort(line), line
    for line in ("[server] listening on http://127.0.0.1:1", "build/libggml-base.so.0(ggml_abort+0x15b)[0x7f449f36cb2b]"):
        assert not looks_like_abort(line), line


def test_signal_exits_are_named() -> None:
    assert exit_description(-6) == "code -6 (SIGABRT)"
    assert exit_description(-11) == "code -11 (SIGSEGV)"
    assert exit_description(1) == "code 1"


def test_a_reason_is_cut_at_whole_lines_keeping_the_first_and_the_abort_line() -> None:
    lines = ["q=2: request failed (server exited with code -6 (SIGABRT));", "GGML_ASSERT(ok) failed"]
    lines += [f"chatter {i} " + "x" * 200 for i in range(100)]
    cut = fit_reason("\n".join(lines))
    assert len(cut) <= REASON_LIMIT
    out = cut.splitlines()
    assert out[0] == lines[0] and out[1] == lines[1]
    assert out[-1] == lines[-1]  # the end kept
    assert all(line in lines or line.startswith("[…") for line in out)  # whole lines only


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=600), max_size=60), st.integers(min_value=200, max_value=5000))
def test_fit_reason_never_exceeds_its_limit(lines: list[str], limit: int) -> None:
    text = "\n".join(lines)
    cut = fit_reason(text, limit)
    assert len(cut) <= limit
    if len(text) <= limit:
        assert cut == text
