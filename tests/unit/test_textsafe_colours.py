"""The guarded output keeps the logger's terminal colours and still lets no workflow command through."""

from __future__ import annotations

from ds4ci import textsafe

RED, RESET = "\x1b[1;31m", "\x1b[0m"


def test_colours_are_kept_and_commands_inside_a_coloured_piece_are_defused() -> None:
    line = f"{RED}error: {RESET}the server printed x ::add-mask::FAIL and ##[warning]forged"
    out = textsafe.neutralise_keeping_colours(line)
    assert out.startswith(RED + "error: " + RESET)
    assert not textsafe.has_command(out)
    assert "\x1b" not in textsafe.neutralise(line)  # plain neutralise escapes every control, colours included


def test_an_escape_that_is_not_a_colour_is_escaped_and_a_colour_joins_no_command() -> None:
    out = textsafe.neutralise_keeping_colours(f":{RESET}:set-output x\x1b]0;title\x07 #{RED}#[warning]")
    assert "\x1b]" not in out and "\x07" not in out  # only ESC [ ... m survives
    assert out.count("\x1b[") == 2 and not textsafe.has_command(out)  # the raw line, as the runner reads it
