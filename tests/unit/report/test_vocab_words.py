"""The first difference in words from a real model's vocabulary: a GGUF target's ``tokenizer.ggml.tokens``, read
from the file the run names when it is on the machine; the IDs stay, and a file that is no GGUF gives no words."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from paths import TESTS

from ds4ci.evidence.results import load
from ds4ci.report.docview import view_of
from ds4ci.report.docview.vocab import decoder

PIECES = ["<s>", "\u2581The", "\u2581answer", "\u2581is", "\u2581forty", "\u2581two", "\u2581three", "."]


def _gguf(path: Path) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(PIECES)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _failing(target: Path) -> Any:
    doc = copy.deepcopy(load(TESTS / "data" / "results" / "fail.json"))
    doc["identities"]["target"]["path"] = str(target)
    doc["identities"]["target"]["sha256"] = "0" * 64  # not one of ds4ci's tiny models
    doc["widths"][0]["prompts"][0]["mismatch"] = {
        "position": 4, "window_start": 0, "target_len": 96, "spec_len": 96,
        "target_ids": [0, 1, 2, 3, 4, 5, 7], "spec_ids": [0, 1, 2, 3, 6, 5, 7]}
    return doc


def test_a_gguf_targets_vocabulary_spells_the_first_difference(tmp_path: Path) -> None:
    view = view_of(_failing(_gguf(tmp_path / "target.gguf")))
    (first,) = view.differences
    assert first.target_text == "<s> The answer is⟦ forty⟧ two."
    assert first.spec_text == "<s> The answer is⟦ three⟧ two."
    assert "[4]" in first.block and "[6]" in first.block  # the IDs are kept


def test_no_words_where_the_vocabulary_is_not_at_hand(tmp_path: Path) -> None:
    missing = view_of(_failing(tmp_path / "absent.gguf"))
    assert missing.differences[0].target_text is None and "[4]" in missing.differences[0].block
    (tmp_path / "not.gguf").write_bytes(b"GGML but not a GGUF")
    assert decoder(_failing(tmp_path / "not.gguf")) is None
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00truncated")
    assert decoder(_failing(tmp_path / "broken.gguf")) is None
