"""Typer parameters made from the options table, so a setting's flag, help and default are declared once.

Typer reads a command's parameters from ``inspect.signature``, which honours ``__signature__``:
``table_flags(command)`` replaces a function's ``**settings`` with one keyword parameter per
option of that command; the function turns them back into loader overrides with
``table.overrides``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ds4ci.options import table

F = TypeVar("F", bound=Callable[..., None])
_ANNOTATED: Any = Annotated  # built at run time from the table: not a static type expression


_METAVARS = {Path: "PATH", int: "N", float: "SECONDS", str: "TEXT"}


def _parameter(option: table.Option) -> inspect.Parameter:
    flag = option.flag or ""
    metavar = option.metavar or _METAVARS.get(option.cli_type, "TEXT")  # never typer's own (<list[str]>)
    info = typer.Option(flag, help=option.flag_help(), metavar=None if option.switch is not None else metavar,
                        show_default=False)
    if option.switch is not None:
        return inspect.Parameter(option.param, inspect.Parameter.KEYWORD_ONLY, default=False,
                                 annotation=_ANNOTATED[bool, info])
    kind: Any = list[option.cli_type] if option.repeat else option.cli_type  # type: ignore[name-defined]
    return inspect.Parameter(option.param, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=_ANNOTATED[kind | None, info])


def table_flags(command: str) -> Callable[[F], F]:
    """Give ``command``'s function the table's flags in place of its ``**settings`` parameter."""

    def wrap(fn: F) -> F:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        signature = inspect.Signature([*own, *(_parameter(o) for o in table.for_command(command))])
        fn.__signature__ = signature  # type: ignore[attr-defined]
        return fn

    return wrap
