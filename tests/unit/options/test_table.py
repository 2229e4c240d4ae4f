"""The options table is the one source of truth: the loader, the CLI, the records and the docs follow it."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import typer.main

from ds4ci.commands import app as cli
from ds4ci.errors import UsageError
from ds4ci.gate import settings
from ds4ci.options import config, table

SHA = "a" * 64
SCHEMA = Path(config.__file__).resolve().parents[1] / "evidence" / "schema" / "result-v1.json"


def models(root: Path) -> dict[str, Any]:
    for name in ("t.gguf", "d.gguf", "p.txt", "q.txt"):
        (root / name).write_text(name)
    server = root / "server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    return {"server_bin": server, "target": root / "t.gguf", "target_sha256": SHA, "draft": root / "d.gguf",
            "draft_sha256": SHA, "prompt_files": [root / "p.txt"], "prompt_sha256s": [SHA], "runner": "r1"}


def command(name: str) -> Any:
    """The click command Typer builds for ``ds4ci NAME`` (what ``--help`` and parsing use)."""
    group: Any = typer.main.get_command(cli.app)
    return group.commands[name]


def flags_of(name: str) -> set[str]:
    return {opt for param in command(name).params for opt in param.opts if opt.startswith("--")} - {"--help"}


def load_cli(args: list[str]) -> config.GateConfig:
    """What ``ds4ci gate ARGS`` loads: the CLI's own parser, then the loader."""
    params = command("gate").make_context("gate", list(args)).params
    overrides = table.overrides("gate", params)
    return config.load(overrides.pop("config_file"), overrides)


def test_no_file_and_no_flags_give_the_table_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = config.load(None, models(tmp_path))
    checked = 0
    for option in table.in_section("gate"):
        if option.default is None or option.attr is None:
            continue
        value = getattr(cfg, option.attr)
        assert value == option.default, option.key
        checked += 1
    assert checked >= 10
    assert cfg.evidence_dir == tmp_path / table.DEFAULT_EVIDENCE_DIR
    assert cfg.mmvq_max_ncols == max(table.DEFAULT_WIDTHS)
    assert cfg.device_args == table.default_device_args(cfg.target_device)
    assert cfg.hash_cache is True and cfg.role == table.get("runner", "role").default


def test_every_gate_flag_is_in_the_table_and_every_table_flag_is_on_its_command() -> None:
    assert flags_of("gate") == {o.flag for o in table.for_command("gate")}
    for name in ("merge-check", "preflight", "publish"):
        wanted = {o.flag for o in table.for_command(name)}
        assert wanted and wanted <= flags_of(name), name
    assert {o.command for o in table.OPTIONS if o.flag} == {"gate", "merge-check", "preflight", "publish"}


def test_flag_help_comes_from_the_table() -> None:
    params = {p.name: p for p in command("gate").params}
    max_tokens = table.get("gate", "max_tokens")
    assert params["max_tokens"].help == max_tokens.flag_help()
    assert "Default: 96." in max_tokens.flag_help() and "Config: gate.max_tokens." in max_tokens.flag_help()


def _allowed(message: str) -> set[str]:
    match = re.search(r"expected only (.*)$", message)
    assert match, message
    return set(match.group(1).split(", "))


@pytest.mark.parametrize(
    ("section", "toml"),
    [
        ("gate", "[gate]\nbogus = 1\n"),
        ("runner", "[runner]\nbogus = 1\n"),
        ("runners", "[runners.r1]\nbogus = 1\n"),
        ("build", "[build]\nbogus = 1\n"),
        ("checks", "[[checks]]\nbogus = 1\n"),
        ("merge", "[merge]\nbogus = 1\n"),
        ("preflight", "[preflight]\nbogus = 1\n"),
    ],
)
def test_the_loader_accepts_exactly_the_table_keys(tmp_path: Path, section: str, toml: str) -> None:
    path = tmp_path / "ds4ci.toml"
    path.write_text(toml)
    with pytest.raises(UsageError, match="unknown key") as err:
        config.load(path, {"runner": "r1"})
    assert _allowed(str(err.value)) == set(table.keys(section))


def test_top_level_tables_are_the_table_sections(tmp_path: Path) -> None:
    path = tmp_path / "ds4ci.toml"
    path.write_text("[bogus]\n")
    with pytest.raises(UsageError, match="unknown key") as err:
        config.load(path, {})
    assert _allowed(str(err.value)) == set(table.TOP_KEYS)
    top = {o.section for o in table.OPTIONS if o.section != table.CLI} - set(table.NESTED_SECTIONS)
    assert set(table.TOP_KEYS) == top | {"runners"}


@pytest.mark.parametrize("option", [o for o in table.OPTIONS if o.section in ("gate", "runner")],
                         ids=lambda o: o.config_key)
def test_runner_tables_set_only_what_the_table_allows(tmp_path: Path, option: table.Option) -> None:
    path = tmp_path / "ds4ci.toml"
    path.write_text(f"[runners.r1]\n{option.key} = 1\n")
    try:
        config.load(path, {"runner": "r1"})
        message = ""
    except UsageError as exc:
        message = str(exc)
    assert ("unknown key" in message) is (not option.runner_table), message


def test_a_runner_table_value_beats_gate_and_a_flag_beats_both(tmp_path: Path) -> None:
    given = models(tmp_path)
    path = tmp_path / "ds4ci.toml"
    path.write_text("[gate]\nmax_tokens = 10\nseed = 5\n[runners.r1]\nmax_tokens = 20\n")
    assert config.load(path, {**given}).max_tokens == 20
    assert config.load(path, {**given}).seed == 5
    assert config.load(path, {**given, "max_tokens": 30}).max_tokens == 30


def test_reproduce_command_round_trips_through_the_cli(tmp_path: Path) -> None:
    given = models(tmp_path)
    args = [
        "--server-bin", str(given["server_bin"]), "--server-sha256", "b" * 64,
        "--target", str(given["target"]), "--target-sha256", SHA, "--draft", str(given["draft"]),
        "--draft-sha256", SHA, "--prompt-file", str(tmp_path / "p.txt"), "--prompt-sha256", SHA,
        "--prompt-file", str(tmp_path / "q.txt"), "--prompt-sha256", "c" * 64,
        "--runner", "r9", "--widths", "3,5", "--max-tokens", "17", "--seed", str(2**64 - 1), "--repeats", "3",
        "--target-device", "cuda:1", "--max-ctx", "2048", "--chunk", "64", "--mmvq-max-ncols", "9",
        "--startup-timeout", "123456.7", "--request-timeout", "1e5", "--stop-timeout", "7",
        "--server-arg=--flag", "--server-arg", "value", "--log-cap-mib", "3",
        "--evidence-dir", str(tmp_path / "ev"), "--source-dir", str(tmp_path), "--base-ref", "origin/main",
        "--upstream-ref", "upstream/main",
    ]
    first = load_cli(args)
    words = shlex.split(settings.reproduce_command(first))
    assert words[:2] == ["ds4ci", "gate"]
    again = load_cli(words[2:])
    assert again == first
    assert again.seed == 2**64 - 1 and again.server_args == ("--flag", "value")


def test_reproduce_keeps_the_config_file_and_leaves_out_a_built_binary(tmp_path: Path) -> None:
    given = models(tmp_path)
    path = tmp_path / "ds4ci.toml"
    path.write_text('[build]\ncommand = "true"\nserver_bin = "built/server"\n')
    cfg = config.load(path, {k: val for k, val in given.items() if k != "server_bin"})
    words = shlex.split(settings.reproduce_command(cfg))
    assert words[words.index("--config") + 1] == str(path.absolute())
    assert "--server-bin" not in words
    assert load_cli(words[2:]) == replace(cfg, config_file=path.absolute())


def test_recorded_settings_are_the_schema_fields(tmp_path: Path) -> None:
    schema = json.loads(SCHEMA.read_text())
    fields = set(schema["properties"]["settings"]["properties"])
    cfg = config.load(None, models(tmp_path))
    recorded = settings.settings_json(cfg)
    assert set(recorded) == fields
    assert {o.recorded for o in table.OPTIONS if o.recorded} <= fields
    assert set(schema["properties"]["settings"]["required"]) <= set(recorded)


def test_every_option_has_help_and_only_known_sections() -> None:
    names = [(o.section, o.key) for o in table.OPTIONS]
    assert len(names) == len(set(names)), "an option is declared twice"
    flags = [(o.command, o.flag) for o in table.OPTIONS if o.flag]
    assert len(flags) == len(set(flags)), "a flag is declared twice"
    for option in table.OPTIONS:
        assert option.help.strip(), option.name
        assert option.section in table.SECTION_TITLES, option.section
        if option.reproduce:
            assert option.flag is not None and option.attr is not None, option.name
