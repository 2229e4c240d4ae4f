"""The tensors of one DS4 block (shared by the target and the DSpark draft) and the output head."""

from __future__ import annotations

from ds4ci.tinymodels.shapes import Shape, mix_dim
from ds4ci.tinymodels.tensors import WEIGHT_STD, TensorSink


def block(sink: TensorSink, s: Shape, il: int, out_std: float = WEIGHT_STD) -> None:
    """``out_std``: std of the projections that write back into the residual stream."""
    p = f"blk.{il}."
    e, d, mix = s.n_embd, s.head_dim, mix_dim(s.n_hc)
    sink.const(p + "attn_norm.weight", [e], 1.0)
    sink.q8(p + "attn_q_a.weight", [e, s.lora_q])
    sink.const(p + "attn_q_a_norm.weight", [s.lora_q], 1.0)
    sink.q8(p + "attn_q_b.weight", [s.lora_q, s.n_head * d])
    sink.q8(p + "attn_kv.weight", [e, d])
    sink.const(p + "attn_kv_a_norm.weight", [d], 1.0)
    sink.const(p + "attn_sinks.weight", [s.n_head], 0.0)
    sink.q8(p + "attn_output_a.weight", [d * s.n_head // s.out_groups, s.lora_o * s.out_groups])
    sink.q8(p + "attn_output_b.weight", [s.lora_o * s.out_groups, e], std=out_std)
    for part in ("attn", "ffn"):
        sink.f16(p + f"hc_{part}_fn.weight", [s.n_hc * e, mix])
        sink.const(p + f"hc_{part}_scale.weight", [3], 1.0)
        sink.f32(p + f"hc_{part}_base.weight", [mix])
    sink.const(p + "ffn_norm.weight", [e], 1.0)
    sink.f32(p + "ffn_gate_inp.weight", [e, s.n_expert])
    sink.const(p + "exp_probs_b.bias", [s.n_expert], 0.0)
    sink.q8(p + "ffn_gate_exps.weight", [e, s.ff_exp, s.n_expert])
    sink.q8(p + "ffn_up_exps.weight", [e, s.ff_exp, s.n_expert])
    sink.q8(p + "ffn_down_exps.weight", [s.ff_exp, e, s.n_expert], std=out_std)
    sink.q8(p + "ffn_gate_shexp.weight", [e, s.ff_exp])
    sink.q8(p + "ffn_up_shexp.weight", [e, s.ff_exp])
    sink.q8(p + "ffn_down_shexp.weight", [s.ff_exp, e], std=out_std)


def compressor(sink: TensorSink, s: Shape, il: int, ratio: int, norm: float = 1.0) -> None:
    """A compressed-attention layer's compressor, and for ratio 4 its sparse indexer. ``norm``: the weight of the
    compressors' output norms (the engine's build_compressor_step multiplies the RMS-normed pooled row by it), so
    a compressed row, key and value alike, is ``norm`` times as loud as with 1.0."""
    p = f"blk.{il}."
    e, d = s.n_embd, s.head_dim
    width = (2 if ratio == 4 else 1) * d
    sink.f32(p + "attn_compressor_ape.weight", [width, ratio])
    sink.q8(p + "attn_compressor_kv.weight", [e, width])
    sink.q8(p + "attn_compressor_gate.weight", [e, width])
    sink.const(p + "attn_compressor_norm.weight", [d], norm)
    if ratio != 4:
        return
    idx = s.indexer_dim
    sink.q8(p + "indexer.attn_q_b.weight", [s.lora_q, s.indexer_heads * idx])
    sink.f16(p + "indexer.proj.weight", [e, s.indexer_heads])
    sink.f32(p + "indexer_compressor_ape.weight", [2 * idx, 4])
    sink.q8(p + "indexer_compressor_kv.weight", [e, 2 * idx])
    sink.q8(p + "indexer_compressor_gate.weight", [e, 2 * idx])
    sink.const(p + "indexer_compressor_norm.weight", [idx], norm)


def output_head(sink: TensorSink, s: Shape) -> None:
    """Output norm and hyper-connection merge (the draft has these too; the lm_head is the target's)."""
    sink.const("output_norm.weight", [s.n_embd], 1.0)
    sink.f16("output_hc_fn.weight", [s.n_hc * s.n_embd, s.n_hc])
    sink.const("output_hc_scale.weight", [1], 1.0)
    sink.f32("output_hc_base.weight", [s.n_hc])
