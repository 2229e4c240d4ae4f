"""The first position where the speculative answer differs from the target-only one: token IDs, aligned and
marked, and where the vocabulary is at hand the decoded text a few tokens either side, for both arms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ds4ci.records import MismatchRecord, Results
from ds4ci.report import markdown
from ds4ci.report.docview.vocab import Decoder
from ds4ci.report.markdown import Trusted

AROUND = 4  # decoded tokens shown on each side of the first difference


@dataclass(frozen=True)
class Difference:
    """One distinct first difference; the widths that differ the same way share it (``qs``)."""

    qs: tuple[int, ...]
    prompt_index: int
    position: int
    target_len: int
    spec_len: int
    block: Trusted  # the IDs around the position, aligned, the position marked
    target_text: str | None  # the decoded text around the position (the differing token in ⟦ ⟧), if decodable
    spec_text: str | None
    server_log: str | None

    @property
    def q(self) -> int:
        return self.qs[0]

    @property
    def widths(self) -> str:
        return ",".join(map(str, self.qs))


def id_block(mismatch: MismatchRecord) -> Trusted:
    """The IDs around the first differing position, aligned, with the position marked."""
    start = mismatch["window_start"]
    position = mismatch["position"]
    target = mismatch["target_ids"]
    spec = mismatch["spec_ids"]
    # Each column as wide as its widest cell (a marked ID carries its brackets), one space between columns, so a
    # marked ID never runs into its neighbour; a caret line points at the first differing column.
    count = max(len(target), len(spec))

    def cell(ids: Sequence[int], offset: int) -> str:
        if offset >= len(ids):
            return "·"
        return f"[{ids[offset]}]" if start + offset == position else str(ids[offset])

    columns = [[str(start + i), cell(target, i), cell(spec, i)] for i in range(count)]
    widths = [max(len(c) for c in column) for column in columns]

    def line(label: str, row: int) -> str:
        return f"{label:<16}" + " ".join(column[row].rjust(w) for column, w in zip(columns, widths, strict=True))

    marks = " ".join(("^" * w if start + i == position else " " * w) for i, w in enumerate(widths)).rstrip()
    body = "\n".join([line("position", 0), line("target-only", 1), line("reference-exact", 2), " " * 16 + marks])
    return markdown.code_block(body, limit=None)


def decoded(ids: Sequence[int], start: int, position: int, decode: Decoder | None) -> str | None:
    """The text of the tokens ``AROUND`` either side of ``position`` (the token there in ⟦ ⟧), or None where a
    token does not decode; "(the answer ends here)" where the arm has no token at the position."""
    if decode is None:
        return None
    at = position - start
    lo, hi = max(at - AROUND, 0), min(at + AROUND + 1, len(ids))
    parts = []
    for offset in range(lo, hi):
        text = decode(ids[offset])
        if text is None:
            return None
        parts.append(f"⟦{text}⟧" if offset == at else text)
    if at >= len(ids):
        parts.append(" ⟦(the answer ends here)⟧")
    return ("…" if lo > 0 else "") + "".join(parts) + ("…" if hi < len(ids) and at < len(ids) else "")


def differences(doc: Results, decode: Decoder | None) -> tuple[Difference, ...]:
    """One entry per distinct first difference, in the document's order."""
    out: dict[tuple[object, ...], Difference] = {}
    for width in doc["widths"]:
        for prompt in width["prompts"]:
            mm = prompt["mismatch"]
            if mm is None:
                continue
            key = (prompt["prompt_index"], mm["position"], mm["target_len"], mm["spec_len"], mm["window_start"],
                   tuple(mm["target_ids"]), tuple(mm["spec_ids"]))
            if key in out:
                seen = out[key]
                out[key] = Difference(**{**vars(seen), "qs": (*seen.qs, width["q"])})
                continue
            start, position = mm["window_start"], mm["position"]
            out[key] = Difference(
                qs=(width["q"],), prompt_index=prompt["prompt_index"], position=position, target_len=mm["target_len"],
                spec_len=mm["spec_len"], block=id_block(mm),
                target_text=decoded(mm["target_ids"], start, position, decode),
                spec_text=decoded(mm["spec_ids"], start, position, decode), server_log=width["server_log"])
    return tuple(out.values())


def first_place(found: Sequence[Difference]) -> str | None:
    """Where the answers first differed: ``q=3, position 42`` (None without a difference)."""
    return f"q={found[0].widths}, position {found[0].position}" if found else None
