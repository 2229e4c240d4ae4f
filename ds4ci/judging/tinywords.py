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


# The targets ``ds4ci tiny-models`` writes, by SHA-256: the only models whose answers ds4ci reads
# as token IDs. Knowing the model is ours comes from the run's pinned, verified target identity,
# never from how an answer looks. tests/unit/judging/test_tinywords.py writes each one again and
# checks its digest, so a change to the writer that changes the files fails until this is updated.
# A set an earlier ds4ci wrote stays known, so that its recorded runs still verify.
FIRST_SUCCESSOR = "ds4ci tiny-models --seed 1, as written before 2026-12-02 (near-ties 1.0 logits apart)"
SECOND_SUCCESSOR = "ds4ci tiny-models --seed 1, as written on 2026-12-02 before its second set (one word in six a near-tie)"
THIRD_SUCCESSOR = "ds4ci tiny-models --seed 1, as written on 2026-12-02 and until 2026-12-03 (window 128, quiet layers)"
FOURTH_SUCCESSOR = "ds4ci tiny-models --seed 1 --design FOURTH (the default from 2026-12-03 until 2026-12-07)"
SHIPPED_SUCCESSOR = "ds4ci tiny-models --seed 1 (the default from 2026-12-07, design FIFTH_LOUD_ALIGNED: FIFTH_LOUD's target)"
KNOWN_TARGETS: dict[str, str] = {
    "77541f4324a8f9d2f1e28110e8dbdf3bfe83f8d3e3d9f065c277b56b53c7dda2": FOURTH_SUCCESSOR,
    "9d3c5ff3b0a787e559c1f200816e932833a488b64950d4ce67689f4b7238cf16": THIRD_SUCCESSOR,
    "e8e6a16ce6caf5323bae5db38bcd970ae29f7b6ef1ffc2ac2f082bd9870b658d": SECOND_SUCCESSOR,
    "e96a205cf3543f561c03a90a3946b0d3e678d00e70231dbee57bd0fe0335b447": FIRST_SUCCESSOR,
    "340fd97fff73dc755f918f8bd0e89ea37b3430c4fb66b81c903e05fd5a40b360": "ds4ci tiny-models --kind random --seed 1",
    # the shipped design, FIFTH_LOUD_ALIGNED, writes FIFTH_LOUD's target (only its prompts differ)
    "155283d1ca0a2a93bce1e171ad775736b8d01bff967f930b3b047fa980cd9749": SHIPPED_SUCCESSOR,
    # the other 2026-12-05 candidates (ds4ci/tinymodels/design.py); FIFTH_ALIGNED's target is FOURTH's
    "c8a3d90f4e1a701a8bef63c07b40d25a63829cfac1ec0a67910e46f9c82f5de9": "ds4ci tiny-models --seed 1 --design FIFTH_LOUDER",
}


def known_target(sha256: str | None) -> str | None:
    """How ``ds4ci tiny-models`` wrote the target with this SHA-256, or None when it is not one of ours."""
    return KNOWN_TARGETS.get(sha256) if sha256 is not None else None
