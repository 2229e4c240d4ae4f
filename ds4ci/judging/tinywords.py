"""How the tiny DS4 models spell their tokens, and how a token sequence is read back from an answer.

Every ordinary token of the tiny models (``ds4ci tiny-models``) decodes to one ASCII word with a
leading space: token 417 is " w417". An answer is therefore its token IDs, one per
space-separated word, and a run can be checked even when the server prints no trace.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"w(0|[1-9][0-9]*)")


def word(token_id: int) -> str:
    """The text token ``token_id`` decodes to."""
    return f" w{token_id}"


def ids_from_text(text: str) -> list[int] | None:
    """The token IDs an answer's text spells, or None when any word is not a tiny-model token."""
    ids: list[int] = []
    for piece in text.split():
        match = _WORD.fullmatch(piece)
        if match is None:
            return None
        ids.append(int(match.group(1)))
    return ids
