"""A bisect result (``ds4ci bisect --json``) read as untrusted data, and rendered as a comment section.

The document is read like a results.json (strict JSON, then a schema), since in a workflow it comes from a job's
artifact. Its section carries role ``bisect`` in the sticky comment's markers, so it sits beside every runner's
gate section (never replacing one) and sets no status; ``templates/bisect.md.j2`` renders it, every value
escaped by the report's finalize hook.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Final, cast

from ds4ci.errors import ResultsError, UsageError
from ds4ci.records import BisectResult
from ds4ci.report import markdown
from ds4ci.report.render import render_template
from ds4ci.report.sections import BISECT, Section

SCHEMA_ID: Final = "ds4ci/bisect/v1"
_STATE: Final = {"found": "fail", "not_found": "not_run", "no_verdict": "error"}
_SHA = {"type": "string", "pattern": "^[0-9a-f]{40}$"}
_TEXT = {"type": "string", "maxLength": 4096}
_COMMIT = {"type": "object", "additionalProperties": False, "required": ["sha", "subject"],
           "properties": {"sha": _SHA, "subject": _TEXT}}
_NULLABLE_INT = {"type": ["integer", "null"], "minimum": 0}
_DIFFERENCE = {"type": "object", "additionalProperties": False, "required": ["q", "prompt_index", "position", "reason"],
               "properties": {"q": {"type": "integer", "minimum": 1, "maximum": 64},
                              "prompt_index": {"type": "integer", "minimum": 0}, "position": _NULLABLE_INT,
                              "reason": _TEXT}}
_STEP = {"type": "object", "additionalProperties": False,
         "required": ["position", "sha", "subject", "outcome", "exit_code", "reason", "duration_s", "evidence",
                      "differences"],
         "properties": {"position": {"type": "integer", "minimum": 0}, "sha": _SHA, "subject": _TEXT,
                        "outcome": {"enum": ["pass", "fail", "skip", "stop"]}, "exit_code": _NULLABLE_INT,
                        "reason": _TEXT, "duration_s": {"type": "number", "minimum": 0},
                        "evidence": {"type": ["string", "null"], "maxLength": 4096},
                        "differences": {"type": "array", "maxItems": 10000, "items": _DIFFERENCE}}}
SCHEMA: Final = {
    "type": "object", "additionalProperties": False,
    "required": ["schema", "runner", "verdict", "exit_code", "reason", "good", "bad", "commits", "expected_steps",
                 "first_failing", "last_passing", "differences", "skipped", "candidates", "steps"],
    "properties": {
        "schema": {"const": SCHEMA_ID}, "runner": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"},
        "verdict": {"enum": list(_STATE)}, "exit_code": {"enum": [0, 1, 3]},
        "reason": _TEXT, "good": _COMMIT, "bad": _COMMIT, "commits": {"type": "integer", "minimum": 2},
        "expected_steps": {"type": "integer", "minimum": 1},
        "first_failing": {"anyOf": [{"type": "null"}, _COMMIT]}, "last_passing": {"anyOf": [{"type": "null"}, _COMMIT]},
        "differences": {"type": "array", "maxItems": 10000, "items": _DIFFERENCE},
        "skipped": {"type": "array", "maxItems": 10000, "items": _STEP},
        "candidates": {"type": "array", "maxItems": 100000, "items": _COMMIT},
        "steps": {"type": "array", "maxItems": 10000, "items": _STEP},
    },
}


def load(path: Path) -> BisectResult:
    """One ``ds4ci bisect --json`` document, strictly read and validated (a UsageError says what is wrong)."""
    import jsonschema

    from ds4ci.evidence.results import strict_json

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--bisect {path}: cannot read it ({exc.strerror or exc})") from exc
    try:
        doc: Any = strict_json(data, str(path))
    except ResultsError as exc:
        raise UsageError(f"--bisect {path}: {exc}") from exc
    problems = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if problems:
        where = "/".join(str(p) for p in problems[0].absolute_path) or "(top level)"
        raise UsageError(f"--bisect {path}: expected a `ds4ci bisect --json` document ({SCHEMA_ID}); at {where}: "
                         f"{problems[0].message[:300]}")
    return cast(BisectResult, doc)


def for_publish(paths: Sequence[Path], runners: Collection[str], head: str) -> tuple[BisectResult, ...]:
    """publish's --bisect documents: each one a published runner's, one per runner, searched up to ``head``.

    A bisect of another runner or another head would put a stale culprit beside today's results: refused.
    """
    found: dict[str, BisectResult] = {}
    for path in paths:
        doc = load(path)
        name = doc["runner"]
        if name not in runners:
            raise UsageError(f"--bisect {path}: it is runner {name}'s bisect; expected one of the runners published "
                             f"here ({', '.join(sorted(runners)) or 'none'})")
        if name in found:
            raise UsageError(f"--bisect {path}: a second bisect of runner {name}; expected one per runner")
        if doc["bad"]["sha"] != head:
            raise UsageError(f"--bisect {path}: it searched up to {doc['bad']['sha']}; expected the head the results "
                             f"are published for, {head}")
        found[name] = doc
    return tuple(found.values())


def digest(doc: BisectResult) -> str:
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def where_it_breaks(doc: BisectResult) -> list[str]:
    """One phrase per failing cell of the first failing commit: "parity at q=3 breaks at position 42"."""
    phrases = []
    for diff in doc["differences"]:
        prompt = f" (prompt {diff['prompt_index']})" if any(d["prompt_index"] for d in doc["differences"]) else ""
        if diff["position"] is not None:
            phrases.append(f"parity at q={diff['q']}{prompt} breaks at position {diff['position']}")
        else:
            phrases.append(f"q={diff['q']}{prompt} fails: {diff['reason'][:200]}")
    return phrases


def section(env: Any, doc: BisectResult, run_url: str | None = None, kind: str = "comment") -> Section:
    """The bisect's part of the sticky comment (``kind="summary"``: with every step)."""
    body = render_template(env, "bisect.md.j2", {"doc": doc, "breaks": where_it_breaks(doc),
                                                 "run_url": run_url, "kind": kind})
    return Section(runner=doc["runner"], role=BISECT, state=_STATE[doc["verdict"]], head=doc["bad"]["sha"], digest=digest(doc),
                   body=body, why=markdown.text(doc["reason"], limit=200))
