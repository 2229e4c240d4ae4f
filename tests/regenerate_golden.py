"""Write the golden comments again (tests/golden/*.md) after a deliberate change to what ds4ci renders.

    python tests/regenerate_golden.py

Runs the golden tests with DS4CI_UPDATE_GOLDEN=1 (each writes its file), then once more without it; read
``git diff tests/golden docs`` before committing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN_TESTS = ["tests/unit/report/test_review_comments.py", "tests/e2e/test_report.py",
                "tests/unit/report/test_example_comment.py"]


def main() -> int:
    command = [sys.executable, "-m", "pytest", "-q", *GOLDEN_TESTS]
    subprocess.run(command, cwd=HERE.parent, env={**os.environ, "DS4CI_UPDATE_GOLDEN": "1"}, check=False)
    return subprocess.run(command, cwd=HERE.parent, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
