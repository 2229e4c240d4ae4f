"""Where the test suite's own files live, for tests in any sub-folder of tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
