"""The tiny DS4 models: what the real loaders require, read back with gguf's own reader, pinned and deterministic."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from ds4ci.judging.tinywords import ids_from_text  # noqa: E402
from ds4ci.options import config  # noqa: E402
from ds4ci.tinymodels.bundle import DRAFT_FILE, MIN_PROMPT_TOKENS, TARGET_FILE, write_tiny_set  # noqa: E402
from ds4ci.tinymodels.shapes import DraftShape, Shape  # noqa: E402
from ds4ci.tinymodels.vocab import SPECIALS, build_vocab, byte_chars  # noqa: E402

# A smaller shape than the default keeps the determinism tests fast; the layout rules are the same.
SMALL = Shape(n_embd=64, n_vocab=320, n_head=2, lora_q=32, lora_o=32, out_groups=2, ff_exp=32)


@pytest.fixture(scope="module")
def default_set(tmp_path_factory: pytest.TempPathFactory):
    return write_tiny_set(tmp_path_factory.mktemp("tiny"), seed=5)


def _fields(reader) -> dict:
    out = {}
    for name, field in reader.fields.items():
        out[name] = field.contents()
    return out


def _tensors(reader) -> dict:
    return {t.name: t for t in reader.tensors}


def test_target_parses_back_with_the_loader_keys_and_shapes(default_set) -> None:
    s = Shape()
    reader = gguf.GGUFReader(default_set.target)
    kv = _fields(reader)
    assert kv["general.architecture"] == "deepseek4"
    for key in ("block_count", "embedding_length", "vocab_size", "attention.head_count", "attention.key_length",
                "attention.q_lora_rank", "attention.output_lora_rank", "attention.output_group_count",
                "expert_count", "hash_layer_count", "attention.indexer.key_length", "hyper_connection.count"):
        assert f"deepseek4.{key}" in kv, key
    assert kv["deepseek4.attention.compress_ratios"] == [0, 0, 4, 128]
    assert kv["deepseek4.attention.head_count"] > 16  # heads x tokens > 16 keeps the attention product out of MMF
    t = _tensors(reader)
    # ggml order (ne): the loader's shapes
    assert list(t["blk.0.attn_q_b.weight"].shape) == [s.lora_q, s.n_head * s.head_dim]
    assert list(t["blk.0.attn_output_a.weight"].shape) == [s.head_dim * s.n_head // s.out_groups, s.lora_o * s.out_groups]
    assert list(t["blk.0.ffn_down_exps.weight"].shape) == [s.ff_exp, s.n_embd, s.n_expert]
    assert list(t["blk.0.ffn_gate_tid2eid.weight"].shape) == [s.n_expert_used, s.n_vocab]
    assert "blk.2.indexer.attn_q_b.weight" in t and "blk.3.attn_compressor_ape.weight" in t
    assert "blk.3.indexer.proj.weight" not in t  # ratio 128 layers have no indexer
    assert "blk.2.ffn_gate_tid2eid.weight" not in t  # only the hash layers carry the table
    assert t["blk.0.attn_output_b.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert t["blk.0.hc_attn_fn.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert t["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32


def test_draft_has_dspark_metadata_and_no_embedding_or_head(default_set) -> None:
    reader = gguf.GGUFReader(default_set.draft)
    kv = _fields(reader)
    p = "deepseek4-dflash-draft."
    assert kv["general.architecture"] == "deepseek4-dflash-draft"
    assert kv[p + "dflash.dspark.enabled"] == 1
    assert kv[p + "dflash.dspark.vocab_size"] == kv[p + "vocab_size"]
    assert kv[p + "dflash.n_target_layers"] == len(kv[p + "dflash.capture_layer_ids"])
    assert kv[p + "dflash.mask_token_id"] == 256 + SPECIALS.index("<｜mask｜>")
    names = set(_tensors(reader))
    assert "token_embd.weight" not in names and "output.weight" not in names
    assert {"dflash.fc.weight", "dflash.hidden_norm.weight", "dflash.dspark.markov.w1", "dflash.dspark.markov.w2"} <= names
    assert not any("compressor" in n or "indexer" in n or "tid2eid" in n for n in names)


def test_vocabulary_decodes_and_only_word_tokens_can_be_generated(default_set) -> None:
    reader = gguf.GGUFReader(default_set.target)
    kv = _fields(reader)
    tokens = kv["tokenizer.ggml.tokens"]
    types = kv["tokenizer.ggml.token_type"]
    assert kv["tokenizer.ggml.model"] == "gpt2"
    assert [tokens[256 + i] for i in range(len(SPECIALS))] == list(SPECIALS)
    assert all(types[256 + i] == 3 for i in range(len(SPECIALS)))
    inverse = {c: b for b, c in enumerate(byte_chars())}
    first_word = 256 + len(SPECIALS)
    for token_id in (first_word, first_word + 1, len(tokens) - 1):
        text = bytes(inverse[c] for c in tokens[token_id]).decode("utf-8")
        assert ids_from_text(text) == [token_id]
    output = _tensors(reader)["output.weight"]
    rows = gguf.quants.dequantize(output.data, output.tensor_type)
    assert not rows[:first_word].any()  # byte and special tokens have all-zero logits
    assert np.abs(rows[first_word:]).min(axis=1).max() > 0


def test_config_pins_every_file_and_loads_with_ds4ci(default_set) -> None:
    text = default_set.config.read_text(encoding="utf-8")
    for path in (default_set.target, default_set.draft, *default_set.prompts):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert digest in text and default_set.sha256[path.name] == digest
    cfg = config.load(default_set.config, {"server_bin": Path(sys.executable)})
    assert cfg.target.path.name == TARGET_FILE and cfg.draft.path.name == DRAFT_FILE
    assert list(cfg.widths) == [2, 3, 4] and cfg.max_tokens == 96 and cfg.repeats == 2
    assert all(len(p.read_bytes()) >= MIN_PROMPT_TOKENS for p in default_set.prompts)
    assert cfg.require_coverage is True  # the successor models exercise the proof, so the gate demands it


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    draft = DraftShape(markov_rank=32)
    a = _bytes(write_tiny_set(tmp_path / "a", 11, SMALL, draft).folder)
    b = _bytes(write_tiny_set(tmp_path / "b", 11, SMALL, draft).folder)
    c = _bytes(write_tiny_set(tmp_path / "c", 12, SMALL, draft).folder)
    assert a == b
    for name in (TARGET_FILE, DRAFT_FILE, "prompt-1.txt", "ds4ci.toml"):
        assert a[name] != c[name], name


def test_refuses_shapes_the_loader_rejects(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="compress_ratios"):
        write_tiny_set(tmp_path / "r", 1, Shape(compress_ratios=(0, 0, 4, 8)))
    with pytest.raises(ValueError, match="capture layers"):
        write_tiny_set(tmp_path / "c", 1, SMALL, DraftShape(capture_layer_ids=(2, 9)))
    with pytest.raises(ValueError, match="word tokens"):
        build_vocab(200)
