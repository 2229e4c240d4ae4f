"""What one gate run records about its own settings: the sealed settings, the reproduce command, overrides.

``results.json`` carries ``settings`` (what ``verify`` re-judges against) and ``reproduce`` (a command
that re-runs this gate when pasted), both derived here from one ``GateConfig``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from ds4ci.errors import NoVerdictError
from ds4ci.judging import judge
from ds4ci.options import table
from ds4ci.options.config import GateConfig
from ds4ci.records import RecordedSettings, Scope


def _attr(cfg: GateConfig, dotted: str) -> list[Any]:
    """The values at a dotted GateConfig path; ``*`` steps into each item of a tuple."""
    found: list[Any] = [cfg]
    for part in dotted.split("."):
        found = [item for value in found for item in value] if part == "*" else [getattr(value, part) for value in found]
    return [value() if callable(value) else value for value in found]


def _text(value: Any) -> str:
    if isinstance(value, Path):
        return str(value.absolute())
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, float):  # short where exact (600, not 600.0), else every digit
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def reproduce_args(cfg: GateConfig) -> list[str]:
    """The flags that re-run this gate, in the options table's order (values that are unset are left out)."""
    parts: list[str] = []
    for option in table.OPTIONS:
        if not option.reproduce or option.flag is None:
            continue
        found = _attr(cfg, option.attr or option.name)
        if option.repeat:  # one flag per item: a tuple value (server_args) is given item by item
            found = [item for value in found for item in (value if isinstance(value, tuple) else (value,))]
        for value in found:
            if value is None or value == () or (option.repeat and value == "") or (
                    option.omit_default and value == option.default):
                continue
            if option.switch is not None:  # a flag without a value: given when the setting is what it gives
                parts += [option.flag] if value == option.switch else []
                continue
            # A repeated value may start with '-' (a server argument): keep it attached to its flag.
            parts += [f"{option.flag}={_text(value)}"] if option.repeat else [option.flag, _text(value)]
    return parts


def reproduce_command(cfg: GateConfig) -> str:
    """A command that re-runs this gate when pasted (absolute paths: it may be pasted anywhere)."""
    text = shlex.join(["ds4ci", "gate", *reproduce_args(cfg)])
    return text if len(text) <= 4000 else text[:3996] + " ..."


def settings_json(cfg: GateConfig) -> RecordedSettings:
    """``results.json`` ``settings``: every option the table records, plus what follows from them."""
    recorded: dict[str, Any] = {}
    for option in table.OPTIONS:
        if option.recorded is not None:
            value = _attr(cfg, option.record_attr or option.attr or option.name)[0]
            recorded[option.recorded] = list(value) if isinstance(value, tuple) else value
    return cast(RecordedSettings, {
        **recorded,
        "request_body": judge.request_body("<prompt>", cfg.seed, cfg.max_tokens),
        "configured_widths": list(cfg.configured_widths),
        "scope": cast(Scope, cfg.scope),
    })


def scope_note(settings: Mapping[str, Any]) -> str:
    """`` (focused rerun: q=4 of the configured 2,3,4)`` for a focused run; empty for a full one."""
    if settings.get("scope") != "focused":
        return ""
    ran = ",".join(str(q) for q in settings.get("widths", []))
    configured = ",".join(str(q) for q in settings.get("configured_widths", []))
    return f" (focused rerun: q={ran} of the configured {configured})"


def judge_settings(cfg: GateConfig, prompt_sha256s: list[str]) -> judge.Settings:
    return judge.Settings(cfg.widths, cfg.repeats, cfg.seed, cfg.max_tokens, tuple(prompt_sha256s))


def present_overrides(cfg: GateConfig) -> list[str]:
    return [str(p) for p in cfg.stale_override_files if p.exists() or p.is_symlink()]


def refuse_stale_overrides(cfg: GateConfig) -> None:
    present = present_overrides(cfg)
    if present:
        raise NoVerdictError(
            "stale override file(s) present that silently change server policy: "
            f"{', '.join(present)}; remove them (they are left over from manual runs) and run again"
        )
