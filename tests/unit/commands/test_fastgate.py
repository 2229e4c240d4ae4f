"""``ds4ci gate`` parsed without Typer gives ``run_from_flags`` exactly what the Typer command gives.

Each argument list runs through both parsers in process; ``run_gate_command`` is replaced by a
recorder, so nothing starts. Lists the fast parser does not take exactly must go to Typer (None).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ds4ci.commands import app as typer_app
from ds4ci.commands import fastgate
from ds4ci.commands import gate as gate_command
from ds4ci.options import table

SHA = "ab" * 32


def sample(option: table.Option) -> str:
    """A plain value of the option's flag type."""
    if option.cli_type is int:
        return "7"
    if option.cli_type is float:
        return "12.5"
    if option.cli_type is Path:
        return f"/tmp/ds4ci-{option.param}"  # never opened: the run is recorded, not started
    return f"value-{option.param}"


def every_flag_once() -> list[str]:
    argv: list[str] = []
    for option in table.for_command("gate"):
        assert option.flag is not None
        argv += [option.flag] if option.switch is not None else [option.flag, sample(option)]
    return argv


ACCEPTED = {
    "nothing": [],
    "every flag once": every_flag_once(),
    "typical run": ["--server-bin", "/opt/dflash_server", "--target", "t.gguf", "--target-sha256", SHA,
                    "--draft", "d.gguf", "--draft-sha256", SHA, "--widths", "2,3,4", "--max-tokens", "96"],
    "repeats and equals forms": ["--prompt-file=a.txt", "--prompt-file", "b.txt", "--prompt-sha256", SHA,
                                 "--prompt-sha256=" + SHA, "--server-arg=--ds4-prefill", "--server-arg=exact",
                                 "--note", "first", "--note=second"],
    "switches": ["--json", "--no-build", "--no-hash-cache"],
    "signed and padded numbers": ["--seed", "+5", "--max-tokens", "007", "--stop-timeout", "-1.5",
                                  "--startup-timeout", "0.25"],
    "last of a repeated single flag wins": ["--runner", "a", "--runner", "b", "--seed", "1", "--seed", "2"],
    "empty string values": ["--runner", "", "--base-ref="],
}

LEFT_TO_TYPER = {
    "help": ["--help"],
    "help among flags": ["--runner", "x", "-h"],
    "abbreviated flag": ["--max-tok", "5"],
    "unknown flag": ["--frobnicate"],
    "positional argument": ["extra"],
    "value starting with a dash": ["--server-arg", "--ds4-prefill"],
    "missing value": ["--runner"],
    "integer in another notation": ["--seed", "0x10"],
    "number in exponent notation": ["--stop-timeout", "1e3"],
    "not a number": ["--max-tokens", "many"],
    "a switch given a value": ["--json=yes"],
}


def recorded_call(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def record(config_file: Path | None, overrides: dict[str, Any], as_json: bool = False,
               junit_xml: Path | None = None) -> int:
        calls.append((config_file, dict(overrides), as_json, junit_xml))
        return 0

    monkeypatch.setattr(gate_command, "run_gate_command", record)
    return calls


def through_typer(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    calls = recorded_call(monkeypatch)
    result = CliRunner().invoke(typer_app.app, ["gate", *argv])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1
    return calls[0]


def through_fast_parser(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    calls = recorded_call(monkeypatch)
    params = fastgate.parse(argv)
    assert params is not None, f"the fast parser refused {argv}"
    assert fastgate.run(params) == 0
    assert len(calls) == 1
    return calls[0]


@pytest.mark.parametrize("argv", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_both_parsers_hand_the_gate_the_same_settings(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fast = through_fast_parser(argv, monkeypatch)
    assert fast == through_typer(argv, monkeypatch)


def test_every_flag_once_sets_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    _config, overrides, as_json, junit_xml = through_fast_parser(every_flag_once(), monkeypatch)
    assert as_json is True and junit_xml is not None
    unset = [name for name, value in overrides.items() if value is None]
    assert not unset, f"flags given but not passed on: {unset}"


@pytest.mark.parametrize("argv", LEFT_TO_TYPER.values(), ids=LEFT_TO_TYPER.keys())
def test_anything_not_plain_is_left_to_typer(argv: list[str]) -> None:
    assert fastgate.parse(argv) is None


def test_an_error_in_the_run_is_one_line_and_its_exit_code(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from ds4ci.errors import UsageError

    def refuse(*_args: Any, **_kwargs: Any) -> int:
        raise UsageError("--seed: expected an unsigned 64-bit integer, found -1")

    monkeypatch.setattr(gate_command, "run_gate_command", refuse)
    params = fastgate.parse(["--seed", "-1"])
    assert params is not None
    assert fastgate.run(params) == 2
    assert capsys.readouterr().err == "ds4ci: error: --seed: expected an unsigned 64-bit integer, found -1\n"
