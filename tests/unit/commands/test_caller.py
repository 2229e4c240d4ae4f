"""The short gate.yml init writes: its two pins read back, moved together, and a file that is not one refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4ci.commands import caller
from ds4ci.errors import UsageError
from ds4ci.options.values import DS4CI_REF_PLACEHOLDER

REF = "acme/ds4ci@" + "0" * 40


def test_the_rendered_caller_names_the_same_ds4ci_twice() -> None:
    assert caller.pins(caller.render(REF)) == (REF, REF)
    assert caller.pins(caller.render(None)) == ("OWNER/ds4ci@TODO", DS4CI_REF_PLACEHOLDER)


def test_repin_moves_both_pins_and_nothing_else() -> None:
    text = caller.render("acme/ds4ci@v0.1.0") + "# an adopter's note about acme/ds4ci@v0.1.0\n"
    moved = caller.repin(text, "acme/ds4ci@v0.2.0", Path("gate.yml"))
    assert caller.pins(moved) == ("acme/ds4ci@v0.2.0", "acme/ds4ci@v0.2.0")
    assert moved.endswith("# an adopter's note about acme/ds4ci@v0.1.0\n")  # a comment is no pin
    assert len(moved.splitlines()) == len(text.splitlines())


def test_a_caller_with_two_uses_lines_is_not_repinned() -> None:
    text = caller.render(REF)
    doubled = text.replace("    permissions: {actions", f"  other:\n    uses: acme/ds4ci/.github/workflows/gate.yml@{'0' * 40}\n"
                                                        "    permissions: {actions")
    with pytest.raises(UsageError, match=r"expected one `uses:` line naming ds4ci .* found 2"):
        caller.repin(doubled, "acme/ds4ci@v0.2.0", Path("gate.yml"))


def test_a_copy_of_the_gate_workflow_is_no_caller() -> None:
    copy = (Path(__file__).resolve().parents[3] / ".github" / "workflows" / "gate.yml").read_text()
    assert not caller.is_caller(copy)


def test_the_tag_pins_zizmor_suppression_follows_the_pin() -> None:
    tagged = caller.render("acme/ds4ci@v0.1.0")
    assert caller.TAG_PIN_NOTE in tagged and caller.TAG_PIN_NOTE not in caller.render(REF)
    to_commit = caller.repin(tagged, REF, Path("gate.yml"))
    assert caller.TAG_PIN_NOTE not in to_commit and caller.pins(to_commit) == (REF, REF)
    back = caller.repin(to_commit, "acme/ds4ci@v0.2.0", Path("gate.yml"))
    assert back.count(caller.TAG_PIN_NOTE) == 1 and caller.pins(back) == ("acme/ds4ci@v0.2.0",) * 2
