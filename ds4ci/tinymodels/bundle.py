"""Writes the whole tiny-model set into a folder: target, draft, prompts, and a pinned ds4ci.toml.

Everything is drawn from one seed: the same seed gives byte-identical files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ds4ci.judging.tinywords import word
from ds4ci.tinymodels import structure
from ds4ci.tinymodels.design import SHIPPED, Design
from ds4ci.tinymodels.draft import write_draft
from ds4ci.tinymodels.shapes import KINDS, SUCCESSOR, DraftShape, Shape
from ds4ci.tinymodels.structure import NearTies, Structure
from ds4ci.tinymodels.target import write_target
from ds4ci.tinymodels.tensors import WEIGHT_STD
from ds4ci.tinymodels.vocab import SPECIALS, build_vocab

TARGET_FILE = "ds4-tiny-target.gguf"
DRAFT_FILE = "ds4-tiny-dspark.gguf"
CONFIG_FILE = "ds4ci.toml"
N_PROMPTS = 2
PROMPT_WORDS = 12  # about 60 bytes: each byte is one prompt token (no merges), so well over 32 tokens
# The successor models' prompts are sized by their design (``design.Design.prompt_bytes``): 118 and
# 248 bytes are 122 and 252 prompt tokens with the chat template's four, so the answer's first eight
# verify steps (the ones the 41ee7d0 build's compare lines show) cross the ratio-128 boundary and the
# sliding window's wrap (positions 127, 128; then 255, 256) and roll back across a ratio-4 boundary at
# every width, from either of the template's endings (a numpy simulation of the loop over the
# intended answers chose the sizes).
CHAT_TEMPLATE_TOKENS = 4  # BOS, User, Assistant, </think>
MIN_PROMPT_TOKENS = 32
RANDOM_MAX_TOKENS = 96


@dataclass(frozen=True)
class TinySet:
    folder: Path
    target: Path
    draft: Path
    prompts: list[Path]
    config: Path
    sha256: dict[str, str]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _prompt(rng: np.random.Generator, index: int, n_vocab: int, first_word: int, n_words: int) -> str:
    words = "".join(word(int(i)) for i in rng.integers(first_word, n_vocab, n_words))
    text = f"Tiny prompt {index}: continue the list{words}\n"
    if len(text.encode("utf-8")) < MIN_PROMPT_TOKENS:
        raise AssertionError("prompt shorter than 32 byte tokens")
    return text


def _sized_prompt(rng: np.random.Generator, index: int, n_vocab: int, first_word: int, size: int) -> str:
    """A prompt of exactly ``size`` bytes: words while they fit, then dots, then a newline."""
    text = f"Tiny prompt {index}: continue the list"
    while True:
        piece = word(int(rng.integers(first_word, n_vocab)))
        if len(text) + len(piece) + 1 > size:
            break
        text += piece
    return text + "." * (size - 1 - len(text)) + "\n"


def _config(names: dict[str, str], sha: dict[str, str], prompts: list[str], kind: str, max_tokens: int) -> str:
    lines = [
        f"# Tiny {kind} DS4 models written by `ds4ci tiny-models` (pinned; regenerate rather than edit).",
        "[gate]",
        f'target = "{names["target"]}"',
        f'target_sha256 = "{sha[names["target"]]}"',
        f'draft = "{names["draft"]}"',
        f'draft_sha256 = "{sha[names["draft"]]}"',
        "prompts = [",
        *[f'    {{ file = "{p}", sha256 = "{sha[p]}" }},' for p in prompts],
        "]",
        "widths = [2, 3, 4]",
        f"max_tokens = {max_tokens}",
        "repeats = 2",
        'target_device = "cuda:0"',
        "startup_timeout = 120",
        "request_timeout = 120",
        "stop_timeout = 30",
        *(["require_coverage = true"] if kind == SUCCESSOR else []),
        "",
    ]
    return "\n".join(lines)


def tiny_structure(seed: int, shape: Shape, near_ties: NearTies = SHIPPED.near_ties) -> Structure:
    """The successor structure that ``write_tiny_set`` builds into the models of ``seed``."""
    vocab = build_vocab(shape.n_vocab)
    endings = [vocab.special("<think>"), vocab.special("</think>")]
    return structure.build(shape.n_vocab, vocab.first_word, [vocab.special(SPECIALS[-1])], endings,
                           np.random.default_rng([seed, 3]), near_ties)


def write_tiny_set(folder: Path, seed: int, shape: Shape | None = None, draft: DraftShape | None = None,
                   kind: str = SUCCESSOR, design: Design = SHIPPED) -> TinySet:
    """Write the set into ``folder`` (created; existing files of the set are replaced).

    ``kind``: ``successor`` (the structure of ``structure``) or ``random`` (the first models: random
    weights, kept for comparison). ``design``: the successor kind's near-ties, layer weight, window,
    prompts and answer length (``design.SHIPPED``; the earlier designs write the earlier sets again).
    The random kind keeps its own: the default shape, 96 tokens, prompts of 12 random words.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    successor = kind == SUCCESSOR
    shape = shape or (Shape(sliding_window=design.sliding_window) if successor else Shape())
    draft = draft or DraftShape()
    folder.mkdir(parents=True, exist_ok=True)
    target, draft_path = folder / TARGET_FILE, folder / DRAFT_FILE
    st = tiny_structure(seed, shape, design.near_ties) if successor else None
    out_std = design.layer_out_std if successor else WEIGHT_STD
    norm = design.compressor_norm if successor else 1.0
    vocab = write_target(target, shape, np.random.default_rng([seed, 0]), st, out_std, norm)
    write_draft(draft_path, shape, draft, vocab.special(SPECIALS[-1]), np.random.default_rng([seed, 1]), st, out_std)
    rng = np.random.default_rng([seed, 2])
    prompts = []
    for i in range(1, N_PROMPTS + 1):
        path = folder / f"prompt-{i}.txt"
        if successor:
            text = _sized_prompt(rng, i, shape.n_vocab, vocab.first_word, design.prompt_bytes[i - 1])
        else:
            text = _prompt(rng, i, shape.n_vocab, vocab.first_word, PROMPT_WORDS)
        path.write_text(text, encoding="utf-8")
        prompts.append(path)
    sha = {p.name: _sha256(p) for p in (target, draft_path, *prompts)}
    config = folder / CONFIG_FILE
    names = {"target": TARGET_FILE, "draft": DRAFT_FILE}
    max_tokens = design.max_tokens if successor else RANDOM_MAX_TOKENS
    config.write_text(_config(names, sha, [p.name for p in prompts], kind, max_tokens), encoding="utf-8")
    return TinySet(folder, target, draft_path, prompts, config, sha)
