"""The one reader of JSON that a server or pull-request code produced: strict, bounded, never a crash.

Python's ``json`` accepts what JSON does not (``NaN``, ``Infinity``, numbers that overflow to
infinity), keeps the last of duplicated keys, and recurses once per nesting level (a 100k-deep
document raises ``RecursionError``, and writing a shallower one back can too). Evidence must be
unambiguous and writable as standard JSON, so this reader refuses all of them with
``StrictJsonError`` (a ``ValueError``) saying what it found:

- nesting deeper than ``MAX_DEPTH`` levels, found by a scan of the brackets outside strings before
  any parsing;
- a non-standard constant (``NaN``, ``Infinity``, ``-Infinity``) or a number that overflows;
- a duplicated key in an object;
- text that is not UTF-8 or not JSON, and values Python cannot convert (overlong integers).
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import re
from collections.abc import Iterable
from typing import Any

MAX_DEPTH = 64  # every document ds4ci writes or reads nests a handful of levels
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_LEVELS = str.maketrans({"[": "\x02", "{": "\x02", "]": "\x00", "}": "\x00"})


class StrictJsonError(ValueError):
    """JSON that strict reading refuses; the message names the source and what was found."""


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` (brackets inside strings do not count)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).translate(_LEVELS).encode("ascii")
    # each opening bracket adds 2 and each closing one 0; minus 1 per bracket seen, that is the depth there
    return max(map(operator.sub, itertools.accumulate(brackets), itertools.count(1)), default=0)


def _hooks(source: str) -> dict[str, Any]:
    def pairs(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise StrictJsonError(f"{source}: duplicate key {key[:100]!r}; expected each key once")
            out[key] = value
        return out

    def constant(name: str) -> Any:
        raise StrictJsonError(f"{source}: non-standard JSON constant {name}; expected finite numbers only")

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise StrictJsonError(f"{source}: number {text[:40]} overflows; expected finite numbers only")
        return value

    return {"object_pairs_hook": pairs, "parse_constant": constant, "parse_float": finite}


def loads(data: bytes | str, source: str) -> Any:
    """``data`` parsed strictly (see the module docstring), or StrictJsonError naming ``source``."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJsonError(f"{source}: not UTF-8 ({exc})") from exc
    found = depth(data)
    if found > MAX_DEPTH:
        raise StrictJsonError(f"{source}: JSON nested {found} levels deep; expected at most {MAX_DEPTH}")
    try:
        return json.loads(data, **_hooks(source))
    except StrictJsonError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJsonError(f"{source}: not valid JSON ({exc})") from exc
    except (ValueError, RecursionError) as exc:  # e.g. an integer literal longer than Python's conversion limit
        raise StrictJsonError(f"{source}: unreadable JSON value ({str(exc)[:200]})") from exc
