"""The tiny DS4 target GGUF: hyperparameters, tokenizer, and every tensor the loader requires."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from ds4ci.tinymodels import layers, structure
from ds4ci.tinymodels.shapes import TARGET_ARCH, Shape, hparams
from ds4ci.tinymodels.structure import Structure
from ds4ci.tinymodels.tensors import WEIGHT_STD, TensorSink
from ds4ci.tinymodels.vocab import SPECIALS, Vocab, build_vocab

NAME = "ds4ci-tiny-random"
SUCCESSOR_NAME = "ds4ci-tiny-successor"


def _metadata(w: GGUFWriter, s: Shape, vocab: Vocab, name: str) -> None:
    w.add_name(name)
    for key, value in hparams(s).items():
        w.add_uint32(f"{TARGET_ARCH}.{key}", value)
    w.add_array(f"{TARGET_ARCH}.attention.compress_ratios", list(s.compress_ratios))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3")
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    w.add_bos_token_id(vocab.special(SPECIALS[0]))


def write_target(path: Path, s: Shape, rng: np.random.Generator, st: Structure | None = None,
                 out_std: float = WEIGHT_STD, compressor_norm: float = 1.0) -> Vocab:
    """Random weights, or with ``st`` the successor structure (``structure``) in the embedding and output head;
    ``out_std``: std of the layers' output projections (``design.Design.layer_out_std``); ``compressor_norm``:
    the compressors' output norm weight (``design.Design.compressor_norm``; a constant, so no draw moves)."""
    if len(s.compress_ratios) != s.n_layer or set(s.compress_ratios) - {0, 4, 128}:
        raise ValueError(f"compress_ratios must give 0, 4 or 128 for each of {s.n_layer} layers: {s.compress_ratios}")
    vocab = build_vocab(s.n_vocab)
    w = GGUFWriter(path, TARGET_ARCH)
    _metadata(w, s, vocab, NAME if st is None else SUCCESSOR_NAME)
    sink = TensorSink(w, rng)
    embedding = sink.f16("token_embd.weight", [s.n_embd, s.n_vocab], std=1.0)
    if st is None:
        sink.q8("output.weight", [s.n_embd, s.n_vocab], std=1.0, zero_rows=range(vocab.first_word))
    else:
        sink.q8_values("output.weight", structure.output_rows(st, embedding.astype(np.float32)))
    layers.output_head(sink, s)
    for il in range(s.n_layer):
        layers.block(sink, s, il, out_std)
        if il < s.n_hash_layer:
            sink.expert_ids(f"blk.{il}.ffn_gate_tid2eid.weight", s.n_expert_used, s.n_vocab, s.n_expert)
        if s.compress_ratios[il]:
            layers.compressor(sink, s, il, s.compress_ratios[il], compressor_norm)
    _finish(w)
    return vocab


def _finish(w: GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
