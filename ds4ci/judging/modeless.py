"""Builds without the reference-exact mode, and what their answers still show.

A build that has no reference-exact mode prints no ``[ds4-exact-verify-trace]`` line in any arm
and no ``[ds4-spec]`` summary with matched/offered counters. The gate cannot judge such a build:
``no_mode_reason`` says so in one reason (verdict error, exit 3; docs/protocol.md).

With the tiny models (``ds4ci tiny-models``) every answer spells its token IDs
(``judging.tinywords``), so ``answer_comparison`` can still say, as information and never as a
verdict, whether the build's own speculation answered what target-only answered. Both read only
sealed files of the attempt: the servers' logs, lifecycle records and response JSONs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ds4ci.judging import confined, strictjson
from ds4ci.judging.protocol import MALFORMED, SUMMARY, TRACE, TRACE_TAG, first_mismatch, scan_log
from ds4ci.judging.tinywords import ids_from_text

NO_MODE = (
    "the server printed no reference-exact trace in any arm and its summaries carry no matched/offered counters: "
    "this build has no reference-exact mode; the gate cannot judge it"
)
INFO = "information, not a gate verdict"
_STREAMS = ("stderr", "stdout")
_SCAN_LIMIT = 4096


def _carries_mode(attempt: Path, key: str) -> bool:
    for stream in _STREAMS:
        path = attempt / "servers" / key / f"{stream}.log"
        try:
            records = scan_log(path, stream, _SCAN_LIMIT, root=attempt).records
        except (confined.ConfinedError, OSError):
            return True  # an unreadable log is not evidence of a missing mode; the judge reports it
        for record in records:
            if record.kind in (TRACE, SUMMARY) or (record.kind == MALFORMED and _claims_mode(record.text)):
                return True
    return False


def _claims_mode(text: str) -> bool:
    """A malformed line still claims the mode when it is a trace or a summary that names a counter."""
    return text.startswith(TRACE_TAG) or "matched=" in text or "offered=" in text


def no_mode_reason(attempt: Path, keys: Sequence[str]) -> str | None:
    """The one reason when none of the arms ``keys`` printed a trace or a countered summary, else None."""
    if not keys or any(_carries_mode(attempt, key) for key in keys):
        return None
    return NO_MODE


def _answers(attempt: Path, key: str) -> dict[int, list[int] | None]:
    """Per prompt, the IDs of the first answered request of server ``key`` (None: not recoverable)."""
    try:
        life = strictjson.loads(confined.read_bytes(attempt, f"servers/{key}/lifecycle.json"), key)
    except (confined.ConfinedError, ValueError):
        return {}
    found: dict[int, list[int] | None] = {}
    for entry in life.get("requests", []):
        index = entry.get("prompt_index")
        if not isinstance(index, int) or index in found or entry.get("answered") is not True:
            continue
        try:
            doc = strictjson.loads(confined.read_bytes(attempt, entry["response"]), key)
            text = doc["choices"][0]["message"]["content"]
        except (confined.ConfinedError, ValueError, KeyError, IndexError, TypeError):
            found[index] = None
            continue
        found[index] = ids_from_text(text) if isinstance(text, str) else None
    return found


def answer_comparison(attempt: Path, target_key: str, spec_keys: Sequence[str]) -> list[str]:
    """Lines saying, per speculative arm and prompt, whether its answer's IDs equal target-only's."""
    target = _answers(attempt, target_key)
    lines = []
    for key in spec_keys:
        answers = _answers(attempt, key)
        for index in sorted(target):
            ref, got = target[index], answers.get(index)
            where = f"{INFO}: {key} prompt {index}"
            if ref is None or got is None:
                lines.append(f"{where}: no answer whose token IDs could be read from its text on both sides")
                continue
            mismatch = first_mismatch(ref, got)
            if mismatch is None:
                lines.append(f"{where}: speculative decoding answered the same {len(ref)} token IDs as target-only")
            else:
                lines.append(f"{where}: differs from target-only at token position {mismatch.position}")
    return lines
