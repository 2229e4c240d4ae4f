"""judging.crash and the report's quotes: a speculative arm's crash after target-only passed, said first."""

from __future__ import annotations

from ds4ci.judging import crash
from ds4ci.report.views import quote_of

CRASH = ("reference-exact q=3: request failed (BrokenAnswer; server exited with code -6 (SIGABRT)): GGML_ASSERT(x) "
         "failed\nabort lines:\n[stderr] GGML_ASSERT(x) failed")


def test_a_crash_after_target_only_passed_is_said_first() -> None:
    assert crash.run_reason(CRASH, True) == "target-only passed; " + CRASH.replace("q=3: ", "q=3 crashed: ", 1)
    assert crash.crashed_arm(CRASH) == "reference-exact q=3"


def test_only_a_crash_after_a_pass_is_rewritten() -> None:
    assert crash.run_reason(CRASH, False) == CRASH
    other = "reference-exact q=3: no answer within 30 s (--request-timeout)"
    assert crash.run_reason(other, True) == other and crash.crashed_arm(other) is None
    before_ready = "reference-exact q=2: server exited with code 1 before it was ready"
    assert crash.run_reason(before_ready, True) == (
        "target-only passed; reference-exact q=2 crashed: server exited with code 1 before it was ready")


def test_a_quote_is_labelled_with_its_arm_and_an_empty_one_is_dropped() -> None:
    label, lines = quote_of(crash.run_reason(CRASH, True))
    assert (label, lines) == ("Log of reference-exact q=3, quoted with its reason",
                              ["abort lines:", "[stderr] GGML_ASSERT(x) failed"])
    old = "reference-exact q=4: request failed (BrokenAnswer; server exited with code 9)\n(empty logs)"
    assert quote_of(old) == ("Log of reference-exact q=4, quoted with its reason", [])  # earlier evidence's words
    assert quote_of("check 'unit': fail: 2 of 5 failed\nFAILED a")[0] == "Quoted with its reason"
