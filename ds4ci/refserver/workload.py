"""The self-test's workload: model files and prompts, the same for the gate run and the measurements.

The target has the default architecture (4 layers, 512 wide, vocabulary 4096); the draft is the
target plus 2 % noise, which accepts most drafts but not all, so rollback is exercised.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ds4ci.refserver.modelfile import DEFAULT_ARCH, DEFAULT_DRAFT_NOISE, Arch, write_model_file

_TOPICS = (
    "why reference-exact speculative decoding must give exactly the token IDs of plain greedy decoding",
    "what a KV-cache rollback snapshot is for, and what goes wrong without one",
    "how a batched verification pass can round differently from single-token decode steps",
    "the difference between bfloat16 and float32 accumulation in a matrix product",
    "how a draft model proposes tokens and how the target accepts a prefix of them",
    "why a parity gate must see at least one rejected draft before it trusts the rollback",
    "what makes greedy decoding deterministic on one GPU and not across two",
    "how to read a first differing position in two token-ID sequences",
)


@dataclass(frozen=True)
class Workload:
    target: Path
    target_sha256: str
    draft: Path
    draft_sha256: str
    prompts: tuple[Path, ...]
    prompt_sha256s: tuple[str, ...]


def prompt_texts(count: int) -> list[str]:
    if not 1 <= count <= len(_TOPICS):
        raise ValueError(f"between 1 and {len(_TOPICS)} prompts, got {count}")
    return [f"Prompt {i}: explain, step by step, {topic}.\n" for i, topic in enumerate(_TOPICS[:count])]


def write_workload(directory: Path, prompts: int, arch: Arch = DEFAULT_ARCH,
                   draft_noise: float = DEFAULT_DRAFT_NOISE) -> Workload:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "target.gguf"
    draft = directory / "draft.gguf"
    target_sha = write_model_file(target, arch=arch, comment="ds4ci self-test target")
    draft_sha = write_model_file(draft, draft_noise=draft_noise, comment="ds4ci self-test draft")
    paths, shas = [], []
    for i, text in enumerate(prompt_texts(prompts)):
        path = directory / f"prompt-{i}.txt"
        data = text.encode("utf-8")
        path.write_bytes(data)
        paths.append(path)
        shas.append(hashlib.sha256(data).hexdigest())
    return Workload(target, target_sha, draft, draft_sha, tuple(paths), tuple(shas))
