"""The tiny DSpark draft GGUF: the target's hyperparameters under the draft's prefix, DFlash/DSpark
metadata, its blocks, feature projection and Markov head (it has no embedding or lm_head: it uses
the target's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from ds4ci.tinymodels import layers, structure
from ds4ci.tinymodels.shapes import DRAFT_ARCH, DraftShape, Shape, hparams
from ds4ci.tinymodels.structure import Structure
from ds4ci.tinymodels.target import NAME, SUCCESSOR_NAME, _finish
from ds4ci.tinymodels.tensors import WEIGHT_STD, TensorSink


def write_draft(path: Path, s: Shape, d: DraftShape, mask_token_id: int, rng: np.random.Generator,
                st: Structure | None = None, out_std: float = WEIGHT_STD) -> None:
    """Random weights, or with ``st`` a Markov head that knows part of the successor structure; ``out_std`` as
    for the target."""
    if any(not 0 <= i < s.n_layer for i in d.capture_layer_ids):
        raise ValueError(f"capture layers {d.capture_layer_ids} must lie in the target's {s.n_layer} layers")
    ds = replace(s, n_layer=d.n_layer, n_hash_layer=0)
    w = GGUFWriter(path, DRAFT_ARCH)
    w.add_name((NAME if st is None else SUCCESSOR_NAME) + "-dspark")
    p = f"{DRAFT_ARCH}."
    for key, value in hparams(ds).items():
        w.add_uint32(p + key, value)
    n_capture = len(d.capture_layer_ids)
    for key, value in {
        "dflash.n_target_layers": n_capture, "dflash.block_size": d.block_size, "dflash.mask_token_id": mask_token_id,
        "dflash.dspark.enabled": 1, "dflash.dspark.markov_rank": d.markov_rank,
        "dflash.dspark.vocab_size": s.n_vocab, "dflash.dspark.confidence_dim": 0,
    }.items():
        w.add_uint32(p + key, value)
    w.add_array(p + "dflash.capture_layer_ids", list(d.capture_layer_ids))
    sink = TensorSink(w, rng)
    layers.output_head(sink, ds)
    sink.q8("dflash.fc.weight", [n_capture * s.n_embd, s.n_embd])
    sink.const("dflash.hidden_norm.weight", [s.n_embd], 1.0)
    if st is None:
        sink.f32("dflash.dspark.markov.w1", [d.markov_rank, s.n_vocab])
        sink.f32("dflash.dspark.markov.w2", [d.markov_rank, s.n_vocab])
    else:
        w1, w2 = structure.markov_rows(st, d.markov_rank, rng)
        sink.f32_values("dflash.dspark.markov.w1", w1)
        sink.f32_values("dflash.dspark.markov.w2", w2)
    for il in range(ds.n_layer):
        layers.block(sink, ds, il, out_std)
    _finish(w)
