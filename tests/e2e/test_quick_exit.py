"""``ds4ci gate`` ends by freezing the heap so interpreter shutdown is quick, and loses nothing doing so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gatekit import Workspace

SCRIPT = """
import atexit, gc, sys
from ds4ci.commands.gate import prepare_quick_exit

class Holder:  # a live reference cycle holding a buffered file that is never closed by hand
    def __init__(self, path):
        self.me = self
        self.fh = open(path, "w")
        self.fh.write("flushed at exit")

if len(sys.argv) > 1:
    kept = Holder(sys.argv[1])
atexit.register(lambda: sys.stdout.write("atexit ran\\n"))
sys.stdout.write("no newline before the freeze")
sys.stderr.write("stderr tail")
frozen = prepare_quick_exit()
assert frozen == (gc.get_freeze_count() > 0)
sys.stdout.write(" frozen=%s " % frozen)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_quick_exit_keeps_buffered_stdio_and_atexit() -> None:
    proc = run()
    assert proc.stdout == "no newline before the freeze frozen=True atexit ran\n"
    assert proc.stderr == "stderr tail"


def test_no_freeze_while_a_file_is_open_for_writing(tmp_path: Path) -> None:
    out = tmp_path / "held.txt"
    proc = run(str(out))
    assert proc.stdout == "no newline before the freeze frozen=False atexit ran\n"
    assert out.read_text() == "flushed at exit"


def test_a_gate_run_through_the_quick_exit_keeps_its_last_lines(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2")
    assert run.code == 0, run.stdout + run.stderr
    assert run.stdout.rstrip().splitlines()[-1] == f"results: {tmp_path / 'results.json'}"
