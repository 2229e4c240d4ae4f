"""The tiny targets ds4ci knows as its own: each table entry is what ``ds4ci tiny-models`` writes today."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ds4ci.judging.tinywords import (
    FIRST_SUCCESSOR,
    FOURTH_SUCCESSOR,
    KNOWN_TARGETS,
    SECOND_SUCCESSOR,
    SHIPPED_SUCCESSOR,
    THIRD_SUCCESSOR,
    known_target,
)


def test_every_known_target_is_what_tiny_models_writes_for_its_seed(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from ds4ci.tinymodels import design
    from ds4ci.tinymodels.bundle import write_tiny_set

    for digest, made_by in KNOWN_TARGETS.items():
        words = made_by.replace(",", " ").split()
        seed = int(words[words.index("--seed") + 1])
        kind = words[words.index("--kind") + 1] if "--kind" in words else "successor"
        earlier = {FIRST_SUCCESSOR: design.FIRST, SECOND_SUCCESSOR: design.SECOND, THIRD_SUCCESSOR: design.THIRD}
        named = design.BY_NAME[words[words.index("--design") + 1]] if "--design" in words else design.SHIPPED
        made = earlier.get(made_by, named)
        folder = tmp_path / f"{kind}-{seed}-{len(list(tmp_path.iterdir()))}"
        written = write_tiny_set(folder, seed, kind=kind, design=made).target
        assert hashlib.sha256(written.read_bytes()).hexdigest() == digest, made_by


def test_only_a_known_digest_is_a_tiny_model() -> None:
    assert known_target("77541f4324a8f9d2f1e28110e8dbdf3bfe83f8d3e3d9f065c277b56b53c7dda2") == FOURTH_SUCCESSOR
    assert known_target("9d3c5ff3b0a787e559c1f200816e932833a488b64950d4ce67689f4b7238cf16") == THIRD_SUCCESSOR
    assert known_target("e8e6a16ce6caf5323bae5db38bcd970ae29f7b6ef1ffc2ac2f082bd9870b658d") == SECOND_SUCCESSOR
    assert known_target("e96a205cf3543f561c03a90a3946b0d3e678d00e70231dbee57bd0fe0335b447") == FIRST_SUCCESSOR
    assert known_target("340fd97fff73dc755f918f8bd0e89ea37b3430c4fb66b81c903e05fd5a40b360") == (
        "ds4ci tiny-models --kind random --seed 1")
    assert known_target("155283d1ca0a2a93bce1e171ad775736b8d01bff967f930b3b047fa980cd9749") == SHIPPED_SUCCESSOR
    assert known_target("0" * 64) is None and known_target(None) is None
