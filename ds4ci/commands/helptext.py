"""``--help`` in a user's words: value names like ``PATH`` and ``BUNDLE...``, never Typer's own type labels.

Typer labels a value by its Python annotation (``<list[Path]>``, ``<str>``) and wraps a required argument in
braces (``{bundles}...``). Here every value is named the way the docs name it: the metavar when the command
gives one, else a plain word for its type (``TEXT``, ``PATH``, ``N``, ``SECONDS``); a repeatable argument ends in
``...`` and an optional one stands in brackets.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from typer import core

_WORDS = {Path: "PATH", str: "TEXT", int: "N", float: "SECONDS", bool: "BOOLEAN"}


def _word(annotation: Any) -> str:
    if typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation)
    return _WORDS.get(annotation, "VALUE")


def _option_type(self: Any, ctx: Any) -> str | None:
    return str(self.metavar) if self.metavar is not None else _word(self.type_descriptor.annotation)


def _argument_type(self: Any, ctx: Any) -> str | None:
    return None  # its name column already says it (the metavar)


def _argument_usage(self: Any) -> str:
    name = str(self.metavar) if self.metavar is not None else str(self.name).upper()
    if self.nargs != 1 and not name.endswith("..."):
        name += "..."
    return name if self.required else f"[{name}]"


def _argument_name(self: Any) -> str:
    return _argument_usage(self).strip("[]")


def install() -> None:
    """Patch Typer's help labels once, before the app renders any help."""
    core.TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    core.TyperArgument.display_type_rich = _argument_type  # type: ignore[method-assign]
    core.TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]
    core.TyperArgument._rich_display_name = _argument_name  # type: ignore[method-assign]
