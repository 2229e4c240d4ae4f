"""``ds4ci gate`` parsed without Typer: the options table's flags, read by argparse, strictly.

Only an argument list this parser takes exactly is run from here: every flag spelled in full
(no abbreviations), each value in its plain form (a decimal integer, a plain decimal number, a
value that does not start with ``-``), no positional arguments, no ``--help``. Anything else returns
``None`` and goes to the Typer command unchanged, which parses it the way it always has and reports
any error itself. Both paths hand ``run_from_flags`` the same parameters; a unit test runs one
argument list through each and compares.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ds4ci.options import table

_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_DECIMAL = re.compile(r"^[+-]?[0-9]+(?:\.[0-9]+)?$")


class _NotPlain(Exception):
    """The argument list is not one this parser takes exactly: the Typer command should parse it."""


class _StrictParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotPlain(message)


def _plain(pattern: re.Pattern[str], convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if not pattern.match(text):
            raise ValueError(text)
        return convert(text)

    return parse


def _converter(kind: type) -> Callable[[str], Any]:
    if kind is int:
        return _plain(_INTEGER, int)
    if kind is float:
        return _plain(_DECIMAL, float)
    if kind is Path:
        return Path
    if kind is str:
        return str
    raise TypeError(f"the options table uses a flag type this parser does not know: {kind.__name__}")


def _parser() -> _StrictParser:
    parser = _StrictParser(prog="ds4ci gate", add_help=False, allow_abbrev=False)
    for option in table.for_command("gate"):
        assert option.flag is not None
        if option.switch is not None:
            parser.add_argument(option.flag, dest=option.param, action="store_true")
        elif option.repeat:
            parser.add_argument(option.flag, dest=option.param, action="append", type=_converter(option.cli_type))
        else:
            parser.add_argument(option.flag, dest=option.param, type=_converter(option.cli_type))
    return parser


def parse(argv: Sequence[str]) -> dict[str, Any] | None:
    """The gate's flags as parameters (name -> value, None when not given), or None: let Typer parse."""
    if any(arg in ("-h", "--help") or arg.startswith("--help=") for arg in argv):
        return None
    try:
        return vars(_parser().parse_args(list(argv)))
    except _NotPlain:
        return None


def run(params: dict[str, Any]) -> int:
    """The gate run, ended like every command: its exit code, or one line and the error's code."""
    from ds4ci.commands.finish import run_command

    def command() -> int:
        from ds4ci.commands.gate import run_from_flags  # inside: even a broken import is one line, exit 3

        return run_from_flags(params)

    return run_command(command)
