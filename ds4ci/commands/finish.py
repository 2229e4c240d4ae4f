"""How every command ends: its exit code, or one line for an error, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from ds4ci.errors import EXIT_ERROR, Ds4ciError
from ds4ci.textsafe import lines, neutralise


def run_command(command: Callable[[], int]) -> int:
    """Run one command's library call; its exit code, or one line on stderr and a Ds4ciError's code."""
    try:
        return command()
    except Ds4ciError as exc:
        print(neutralise(f"ds4ci: error: {exc}"), file=sys.stderr, flush=True)  # reasons quote server text
        return exc.exit_code
    except KeyboardInterrupt:
        print("ds4ci: interrupted", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except Exception as exc:  # a bug in ds4ci: one line and exit 3 (no verdict), never a traceback or exit 1
        first = lines(str(exc))[0]
        print(f"ds4ci: internal error (a bug in ds4ci, please report it): {type(exc).__name__}: {first}",
              file=sys.stderr, flush=True)
        return EXIT_ERROR


def exit_with(command: Callable[[], int]) -> NoReturn:
    """``run_command`` inside a Typer command: its code ends the process."""
    import typer

    raise typer.Exit(run_command(command))
