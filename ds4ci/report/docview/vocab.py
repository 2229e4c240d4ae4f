"""The text a token ID decodes to, where the model's vocabulary is at hand: the words of ds4ci's tiny models
(known by the target's pinned SHA-256), else a GGUF target's ``tokenizer.ggml.tokens`` read from the file the
run names, when it is on this machine. A decoder only labels IDs for a reader; parity is judged on IDs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ds4ci.judging.tinywords import known_target, word
from ds4ci.records import Results

Decoder = Callable[[int], str | None]
MAX_VOCAB = 1_000_000  # a vocabulary larger than this is not read


def _pieces(path: Path) -> list[str] | None:
    """The target's token pieces, or None where the file is not a readable GGUF with a vocabulary."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as fh:
            if fh.read(4) != b"GGUF":
                return None
        import gguf

        field = gguf.GGUFReader(str(path)).fields.get("tokenizer.ggml.tokens")
        if field is None or len(field.data) > MAX_VOCAB:
            return None
        return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
    except Exception:
        return None


def _plain(piece: str) -> str:
    """A SentencePiece or byte-level BPE piece as the text it stands for (word starts as spaces)."""
    return piece.replace("\u2581", " ").replace("\u0120", " ").replace("\u010a", "\n")


def decoder(doc: Results) -> Decoder | None:
    """How this run's target decodes token IDs, or None where its vocabulary is not at hand."""
    target = doc["identities"]["target"]
    if target is None:
        return None
    if known_target(target["sha256"]) is not None:
        return word
    pieces = _pieces(Path(target["path"]))
    if pieces is None:
        return None
    table = pieces
    return lambda i: _plain(table[i]) if 0 <= i < len(table) else None
