"""The tiny models' GPT-2 byte-level BPE vocabulary.

IDs 0-255 are the 256 byte tokens (so any prompt text encodes, one token per byte; there are no
merges), then the special tokens the DS4 chat format needs, then ordinary word tokens
(``judging.tinywords``). The target's output rows of byte and special tokens are zero, so the
models only ever generate word tokens: every answer is valid UTF-8 and spells its token IDs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ds4ci.judging.tinywords import word

SPECIALS = (
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>", "<｜mask｜>",
)
NORMAL, CONTROL = 1, 3
N_BYTES = 256


def byte_chars() -> list[str]:
    """GPT-2's printable stand-in character for each byte value 0-255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def encode_text(text: str) -> str:
    """A string in GPT-2's byte-level spelling."""
    table = byte_chars()
    return "".join(table[b] for b in text.encode("utf-8"))


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    types: list[int]

    @property
    def first_word(self) -> int:
        return N_BYTES + len(SPECIALS)

    def special(self, text: str) -> int:
        return N_BYTES + SPECIALS.index(text)


def build_vocab(n_vocab: int) -> Vocab:
    first_word = N_BYTES + len(SPECIALS)
    if n_vocab <= first_word:
        raise ValueError(f"vocabulary of {n_vocab} leaves no word tokens (needs more than {first_word})")
    tokens = byte_chars() + list(SPECIALS) + [encode_text(word(i)) for i in range(first_word, n_vocab)]
    types = [NORMAL] * N_BYTES + [CONTROL] * len(SPECIALS) + [NORMAL] * (n_vocab - first_word)
    return Vocab(tokens, types)
