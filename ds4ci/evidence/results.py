"""The versioned ``results.json`` document: schema, strict loading, atomic writing.

A results file may come from an artifact of a fork's run, so loading treats it as untrusted:
size limit first, strict JSON (no duplicate keys, no NaN/Infinity), then the JSON Schema.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Final, cast

from ds4ci.errors import ResultsError
from ds4ci.evidence import convert
from ds4ci.fileio import write_text_atomic
from ds4ci.judging import strictjson
from ds4ci.records import Results

SCHEMA_ID: Final = "ds4ci/result/v1"
SCHEMA_VERSION: Final = convert.CURRENT
MAX_RESULTS_BYTES = 8 * 1024 * 1024


def schema() -> dict[str, Any]:
    text = resources.files("ds4ci.evidence").joinpath("schema/result-v1.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


_DATE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _is_date_time(value: object) -> bool:
    """RFC 3339 date-time, checked here so validation never depends on optional packages."""
    if not isinstance(value, str):
        return True  # the type keyword reports non-strings
    match = _DATE_TIME.match(value)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    try:
        datetime(year, month, day, hour, minute, min(second, 59))
    except ValueError:
        return False
    return second <= 60


_VALIDATOR: list[Any] = []  # the one Draft 2020-12 validator of this process, once built
_VALIDATOR_LOCK = threading.Lock()


def _validator() -> Any:
    """The v1 validator, built on first use (importing jsonschema takes ~0.15 s; building it, ~10 ms)."""
    with _VALIDATOR_LOCK:
        if not _VALIDATOR:
            import jsonschema  # heavy import kept off the CLI start-up path

            checker = jsonschema.FormatChecker(formats=())
            checker.checks("date-time")(_is_date_time)
            _VALIDATOR.append(jsonschema.Draft202012Validator(schema(), format_checker=checker))
        return _VALIDATOR[0]


def preload() -> None:
    """Build the validator in a daemon thread: the gate calls this while its first server loads, so
    writing results.json at the end does not wait for the import. ``validate`` waits for it if needed."""
    threading.Thread(target=_validator, name="ds4ci-results-schema", daemon=True).start()


_VALID: OrderedDict[bytes, None] = OrderedDict()  # digests of the documents found valid here, newest last
_VALID_MAX = 64
_VALID_LOCK = threading.Lock()


def _digest(doc: dict[str, Any]) -> bytes | None:
    """The SHA-256 of ``doc`` as canonical JSON, when that text stands for exactly this document; else None.

    Canonical JSON parsed back must equal ``doc``: a tuple (not a JSON array to the schema), a non-string key
    or a non-JSON value never gets a digest, and ``true``/``1``/``1.0`` are different texts."""
    try:
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        if json.loads(text) != doc:
            return None
    except (TypeError, ValueError, RecursionError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _schema_errors(doc: dict[str, Any]) -> list[Any]:
    """The schema's errors in ``doc`` sorted by path; none for a document equal to one found valid before.

    Validation is a pure function of the document (one schema, one format checker): a verify validates
    results.json, then the derived document, which for an intact bundle is the same one."""
    digest = _digest(doc)
    if digest is not None:
        with _VALID_LOCK:
            if digest in _VALID:
                _VALID.move_to_end(digest)
                return []
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors and digest is not None:
        with _VALID_LOCK:
            _VALID[digest] = None
            while len(_VALID) > _VALID_MAX:
                _VALID.popitem(last=False)
    return errors


def validate(doc: object, source: str = "results") -> Results:
    """Validate a parsed document against the v1 schema; return it typed, or raise ResultsError.

    The schema is the authority; ``tests/unit/evidence/test_records.py`` proves the ``Results``
    record describes exactly what it allows, which is what makes the cast below sound.
    """
    if not isinstance(doc, dict):
        raise ResultsError(f"{source}: expected a JSON object at the top level, found {type(doc).__name__}")
    if doc.get("schema") != SCHEMA_ID:
        raise ResultsError(f"{source}: expected \"schema\": \"{SCHEMA_ID}\", found {doc.get('schema')!r}")
    errors = _schema_errors(doc)
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ResultsError(f"{source}: schema violation at {where}: {first.message[:300]}{more}")
    return cast(Results, doc)


def strict_json(data: bytes, source: str) -> Any:
    """Parse untrusted JSON strictly (size limit, then ``judging.strictjson``: UTF-8, bounded depth, no duplicate
    keys, finite numbers only)."""
    if len(data) > MAX_RESULTS_BYTES:
        raise ResultsError(f"{source}: {len(data)} bytes is over the {MAX_RESULTS_BYTES}-byte limit")
    try:
        return strictjson.loads(data, source)
    except strictjson.StrictJsonError as exc:
        raise ResultsError(str(exc)) from exc


def sealed(data: bytes, source: str = "results") -> tuple[Results, int]:
    """A results document of any schema version this ds4ci reads, in today's shape, and the version it was
    sealed with (``convert``); raises ``convert.UnreadableSchema`` for a version it cannot read."""
    doc = strict_json(data, source)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_ID:
        return validate(doc, source), SCHEMA_VERSION  # validate says what was expected and found
    version = convert.sealed_version(doc, source)
    return validate(convert.to_current(doc, source), source), version


def loads(data: bytes, source: str = "results") -> Results:
    """A results document of any schema version this ds4ci reads, in today's shape."""
    return sealed(data, source)[0]


def load(path: Path) -> Results:
    """Read and strictly validate one results file."""
    try:
        size = path.stat().st_size
        if size > MAX_RESULTS_BYTES:
            raise ResultsError(f"{path}: {size} bytes is over the {MAX_RESULTS_BYTES}-byte limit for results")
        with path.open("rb") as fh:
            data = fh.read(MAX_RESULTS_BYTES + 1)
    except OSError as exc:
        raise ResultsError(f"cannot read results file {path}: {exc.strerror or exc}") from exc
    return loads(data, str(path))


def dumps(doc: Results) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_atomic(path: Path, doc: Results) -> str:
    """Validate ``doc``, write it to ``path`` via a temporary file and rename (never half-written).

    Returns the text written: a caller that writes the same document elsewhere too (the gate's
    --results-out) writes this text instead of serialising and validating it again.
    """
    validate(doc, str(path))
    text = dumps(doc)
    write_text_atomic(path, text)
    return text
