"""docs/configuration.md is generated from the options table and must not go stale."""

from __future__ import annotations

from pathlib import Path

from ds4ci.options import docs, table

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_configuration_doc_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == docs.render(), (
        f"docs/configuration.md is stale; regenerate it with: {docs.REGENERATE}"
    )


def test_configuration_doc_names_every_key_and_flag() -> None:
    text = docs.render()
    for option in table.OPTIONS:
        assert f"`{option.key if option.section != table.CLI else option.flag}`" in text, option.name
        if option.flag and option.section != table.CLI:
            assert option.flag in text, option.flag
    assert docs.REGENERATE in text.splitlines()[2]
