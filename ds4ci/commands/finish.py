"""How every command ends: its exit code, or one line for an error, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import typer

from ds4ci.errors import EXIT_ERROR, Ds4ciError


def exit_with(command: Callable[[], int]) -> NoReturn:
    """Run one command's library call; its exit code, or a Ds4ciError's, ends the process."""
    try:
        code = command()
    except Ds4ciError as exc:
        typer.echo(f"ds4ci: error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from exc
    except Exception as exc:  # a bug in ds4ci: one line and exit 3 (no verdict), never a traceback or exit 1
        first = str(exc).splitlines()[0] if str(exc) else ""
        typer.echo(f"ds4ci: internal error (a bug in ds4ci, please report it): {type(exc).__name__}: {first}", err=True)
        raise typer.Exit(EXIT_ERROR) from exc
    raise typer.Exit(code)
