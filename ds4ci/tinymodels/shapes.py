"""The tiny models' hyperparameters, chosen so the real CUDA kernels accept every graph they build.

Facts behind the numbers (read from the public server's graph code and tried on an H200):
- The explicit attention (the only DS4 attention on CUDA) multiplies the value rows by a view of
  the soft-max scores whose row stride is n_attn + 1. ggml's MMF kernel asserts an even stride,
  and it is chosen for F32 operands when n_head * n_tokens <= 16. With 32 heads the product is
  at least 32, so that product always goes through cuBLAS, as with the real files' 64 heads.
- Weights that matmuls read are Q8_0 (32-wide blocks), like the real files' quantized tensors;
  the grouped attention-output matmul asserts a quantized (MMQ) type.
- Hyper-connection mixers and the indexer projection are F16, norms, biases and sinks F32, as in
  the real files. Key length 512 with 64 rotary dimensions and indexer key length 128 are what
  the loaders and kernels expect; hyper-connection count is 4.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    n_layer: int = 4
    compress_ratios: tuple[int, ...] = (0, 0, 4, 128)
    n_embd: int = 512
    n_vocab: int = 1024
    n_head: int = 32
    head_dim: int = 512
    n_rot: int = 64
    lora_q: int = 64
    lora_o: int = 128
    out_groups: int = 8
    n_expert: int = 8
    n_expert_used: int = 2
    n_expert_shared: int = 1
    ff_exp: int = 256
    n_hash_layer: int = 2
    sliding_window: int = 128
    indexer_heads: int = 4
    indexer_dim: int = 128
    indexer_top_k: int = 512
    n_hc: int = 4
    sinkhorn_iterations: int = 20


@dataclass(frozen=True)
class DraftShape:
    n_layer: int = 1
    block_size: int = 5
    capture_layer_ids: tuple[int, ...] = (2, 3)
    markov_rank: int = 256


# The model kinds `ds4ci tiny-models --kind` writes: the successor structure (default) or the first,
# random-weight models (kept for comparison).
SUCCESSOR, RANDOM = "successor", "random"
KINDS = (SUCCESSOR, RANDOM)

TARGET_ARCH = "deepseek4"
DRAFT_ARCH = "deepseek4-dflash-draft"


def mix_dim(n_hc: int) -> int:
    """Width of a hyper-connection mixer: pre and post weights plus the n_hc x n_hc combination."""
    return 2 * n_hc + n_hc * n_hc


def hparams(shape: Shape) -> dict[str, int]:
    """The u32 hyperparameters both files carry under their architecture's prefix."""
    return {
        "block_count": shape.n_layer, "embedding_length": shape.n_embd, "vocab_size": shape.n_vocab,
        "attention.head_count": shape.n_head, "attention.head_count_kv": 1,
        "attention.key_length": shape.head_dim, "attention.q_lora_rank": shape.lora_q,
        "attention.output_lora_rank": shape.lora_o, "attention.output_group_count": shape.out_groups,
        "attention.sliding_window": shape.sliding_window, "rope.dimension_count": shape.n_rot,
        "expert_count": shape.n_expert, "expert_used_count": shape.n_expert_used,
        "expert_shared_count": shape.n_expert_shared, "expert_feed_forward_length": shape.ff_exp,
        "hash_layer_count": shape.n_hash_layer, "attention.indexer.head_count": shape.indexer_heads,
        "attention.indexer.key_length": shape.indexer_dim, "attention.indexer.top_k": shape.indexer_top_k,
        "hyper_connection.count": shape.n_hc, "hyper_connection.sinkhorn_iterations": shape.sinkhorn_iterations,
    }
