"""Escaping untrusted strings for GitHub-flavoured Markdown.

Everything a results file says (server names, paths, reasons, log tails) may come from a fork's
run, so before it reaches a PR comment it must not be able to: break a table (``|``, newlines),
inject HTML or a hidden marker (``<``, ``>``, ``&``), close a code span or block (backticks),
form a link or image (``[``, ``]``, autolinks), ping people (``@name``) or cross-reference
issues (``#123``). Two shapes of output exist: plain text (HTML entities work) and code
(entities do not work there, so the dangerous sequences are broken with invisible joiners).

Rendered fragments that are already safe are wrapped in :class:`Trusted`; the template
engine's finalize hook escapes every value that is not.
"""

from __future__ import annotations

import re

from ds4ci.textsafe import BIDI_CONTROLS

ZWJ = "\u200d"  # zero-width joiner: invisible, but breaks @mentions, autolinks and markers
ELLIPSIS = "…"

# C0/C1 controls (tab and newline are handled separately) and bidirectional overrides that
# could make a reviewer read something other than what is there.
_INVISIBLE = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{BIDI_CONTROLS}]")
_NEWLINES = re.compile(r"\r\n|\r|\n")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")
_ISSUE_REF = re.compile(r"(#|GH-)(?=\d)", re.IGNORECASE)
_AUTOLINK = re.compile(r"(?i)(://|www\.)")
_HTML_COMMENT = re.compile(r"<!|--(?=>)")

# Characters that mean something to Markdown or HTML, replaced by numeric entities in text.
_TEXT_ENTITIES = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "|": "&#124;",
    "`": "&#96;",
    "[": "&#91;",
    "]": "&#93;",
    "*": "&#42;",
    "_": "&#95;",
    "~": "&#126;",
    "\\": "&#92;",
    "!": "&#33;",
    "#": "&#35;",
    '"': "&quot;",
}
_TEXT_SPECIALS = re.compile("[" + re.escape("".join(_TEXT_ENTITIES)) + "]")


class Trusted(str):
    """A fragment produced by our own escaping or templates: emitted as-is."""

    __slots__ = ()


def cut_at_word(value: str, limit: int) -> str:
    """``value`` within ``limit`` characters, cut after a whole word (never mid-word
    unless a single word is that long), the cut marked by an ellipsis."""
    if len(value) <= limit:
        return value
    cut = value[: max(limit - 1, 0)]
    space = cut.rfind(" ")
    if space > 0:
        cut = cut[:space].rstrip(" ,;:(")
    return cut + ELLIPSIS


def _clip(value: str, limit: int | None) -> str:
    return value if limit is None else cut_at_word(value, limit)


def _defuse(value: str) -> str:
    """Break mentions, issue references and autolinks with an invisible joiner."""
    value = _MENTION.sub("@" + ZWJ, value)
    value = _ISSUE_REF.sub(lambda m: m.group(1) + ZWJ, value)
    return _AUTOLINK.sub(lambda m: m.group(1)[0] + ZWJ + m.group(1)[1:], value)


def clean(value: object) -> str:
    """The value as text with invisible controls removed (no Markdown escaping)."""
    return _INVISIBLE.sub("", str(value))


def text(value: object, limit: int | None = 300) -> Trusted:
    """Escape for Markdown text and table cells: one line, entities for every special character."""
    raw = _defuse(_clip(_NEWLINES.sub(" ", clean(value)).replace("\t", " "), limit))
    # Defused before escaping: the entities themselves contain "#<digit>".
    return Trusted(_TEXT_SPECIALS.sub(lambda m: _TEXT_ENTITIES[m.group(0)], raw))


def _defuse_code(value: str) -> str:
    # Inside code, entities are shown literally, so HTML comments (our markers) are broken
    # with a joiner instead; mentions and links do not form inside code at all.
    return _HTML_COMMENT.sub(lambda m: m.group(0)[0] + ZWJ + m.group(0)[1:], value)


def code(value: object, limit: int | None = 300) -> Trusted:
    """An inline code span that is safe inside a table cell and cannot be closed early."""
    raw = _clip(_NEWLINES.sub(" ", clean(value)).replace("\t", " "), limit)
    raw = _defuse_code(raw).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", raw)), default=0)
    fence = "`" * (longest + 1)
    # A space on each side keeps a leading or trailing backtick from joining the fence.
    pad = " " if raw.startswith("`") or raw.endswith("`") or not raw.strip() else ""
    return Trusted(f"{fence}{pad}{raw}{pad}{fence}")


def code_block(value: object, limit: int | None = 8000, info: str = "text") -> Trusted:
    """A fenced code block whose fence is longer than any backtick run inside it."""
    raw = _NEWLINES.sub("\n", clean(value).replace("\t", "    "))
    if limit is not None and len(raw) > limit:
        # Keep the end: for log tails the last lines are the informative ones.
        raw = ELLIPSIS + raw[-(limit - 1) :]
    raw = _defuse_code(raw)
    longest = max((len(run) for run in re.findall(r"`+", raw)), default=0)
    fence = "`" * max(3, longest + 1)
    return Trusted(f"{fence}{info}\n{raw}\n{fence}")


_SAFE_URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._~%/+=&?#:@,;-]*)?$")


def link(label: str, url: str | None) -> Trusted:
    """A Markdown link to an operator-given URL, or the label alone when the URL is unusable."""
    if url and _SAFE_URL.match(url) and "(" not in url and ")" not in url:
        return Trusted(f"[{text(label)}]({url})")
    return text(label)


def finalize(value: object) -> object:
    """Jinja2 finalize hook: escape every value that has not been explicitly trusted."""
    if isinstance(value, Trusted):
        return value
    if value is None:
        return ""
    return text(value, limit=1000)
