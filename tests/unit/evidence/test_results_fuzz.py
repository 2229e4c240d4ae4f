"""Property-based fuzzing of ``ds4ci.evidence.results.loads``, the loader of untrusted results files.

The contract under test: whatever bytes arrive (an artifact from a fork's run is attacker-controlled),
``loads`` either returns a document that validates against the v1 schema, or raises ``ResultsError``.
No other exception may escape (a traceback instead of exit 2 is a crash of ``ds4ci report``/``publish``),
and a document it accepts must survive a round trip through ``dumps`` unchanged.

Example counts are bounded for CI (200 per property); ``DS4CI_FUZZ_EXAMPLES=N`` raises them for the
longer run described in docs/fuzzing.md (``bench/fuzz_long.py`` drives it).

The bugs this fuzzer found (deep nesting, huge integer literals, float overflow, unchecked
date-time, rejections not naming the file; fixed in results.py) are pinned by the regression
tests at the bottom.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from paths import TESTS

from ds4ci.errors import ResultsError
from ds4ci.evidence import results

DATA = TESTS / "data" / "results"
BASES: dict[str, dict[str, Any]] = {p.name: json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))}
EXAMPLES = int(os.environ.get("DS4CI_FUZZ_EXAMPLES", "200"))

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# --- the oracle ---------------------------------------------------------------------------------


def _note(what: str) -> None:
    """Count an outcome in hypothesis' statistics (only possible inside a property)."""
    if currently_in_test_context():
        event(what)


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def check_loads(data: bytes) -> dict[str, Any] | None:
    """Apply the contract to one input; return the accepted document (None when rejected)."""
    try:
        doc = results.loads(data, "fuzz")
    except ResultsError as exc:
        assert str(exc).strip(), "a rejection must say why"
        _note("rejected with ResultsError")
        return None
    except Exception as exc:  # anything else escaping is the bug this fuzzer hunts
        raise AssertionError(f"loads let {type(exc).__name__} escape for {data[:200]!r}") from exc
    assert isinstance(doc, dict)
    assert not _has_non_finite(doc), "an accepted document must hold finite numbers only"
    _note("accepted")
    # Accepted means valid, and byte-level stable: what dumps writes is read back identically.
    results.validate(copy.deepcopy(doc), "again")
    text = results.dumps(doc)
    assert results.loads(text.encode("utf-8")) == doc
    assert results.dumps(results.loads(text.encode("utf-8"))) == text
    return doc


# --- strategies ---------------------------------------------------------------------------------

# Lone surrogates are legal in JSON text (\ud800) and in Python str, but not encodable as UTF-8.
_any_char = st.characters(codec=None) | st.sampled_from(["\ud800", "\udfff", "\x00", "\u2028", "\ufeff", "é"])
_text = st.text(_any_char, max_size=40)
_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2, 64, 65, -0.0, 0.5, 1e308, 2**63, 2**64]),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _text)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=25,
)

_tokens = st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"', '"schema"', '"ds4ci/result/v1"', '"verdict"', '"pass"', "null", "true",
    "false", "NaN", "Infinity", "-Infinity", "1e400", "-0", "01", "1.", ".5", "\\u0000", "\\ud800", "\\", " ",
    "\n", "\ufeff", "\xff", "0" * 50,
])
jsonish_text = st.lists(_tokens | _text, max_size=60).map("".join)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a document (the root included), as key/index tuples."""
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _paths(child, (*prefix, index))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _nest(value: Any, depth: int, as_list: bool) -> Any:
    for _ in range(depth):
        value = [value] if as_list else {"k": value}
    return value


# Depth stays below the interpreter's recursion limit here: deeper is the pinned RecursionError bug.
_replacements = st.one_of(
    json_values,
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    st.integers(min_value=4097, max_value=70_000).map(lambda n: "x" * n),  # over text/longtext maxLength
    st.sampled_from([9 * 1024 * 1024]).map(lambda n: "y" * n),  # the whole file over the size limit
    st.tuples(json_values, st.integers(1, 200), st.booleans()).map(lambda t: _nest(*t)),
)


@st.composite
def mutated_documents(draw: st.DrawFn) -> bytes:
    """A valid results document with a few structural or textual mutations applied."""
    doc = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        parent_path, leaf = path[:-1], path[-1] if path else None
        op = draw(st.sampled_from(["drop", "replace", "add-key", "duplicate-list-item"]))
        if not path:
            doc = draw(_replacements)
            continue
        parent = _get(doc, parent_path)
        if op == "drop":
            del parent[leaf]
        elif op == "replace":
            parent[leaf] = draw(_replacements)
        elif op == "add-key" and isinstance(parent, dict):
            parent[draw(_text)] = draw(json_values)
        elif op == "duplicate-list-item" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[leaf]))
    text = json.dumps(doc, allow_nan=True, ensure_ascii=draw(st.booleans()))
    # Textual mutations that a dict cannot express.
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["duplicate-key", "truncate", "splice", "number-literal"]))
        if kind == "duplicate-key" and text.startswith("{") and len(text) > 2:
            key = json.dumps(draw(st.sampled_from([*sorted(BASES["pass.json"]), "schema"])))
            text = "{" + key + ": " + json.dumps(draw(json_values), allow_nan=True) + ", " + text[1:]
        elif kind == "truncate":
            text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
        elif kind == "splice":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(jsonish_text) + text[at:]
        elif kind == "number-literal":
            # Literals json.dumps never writes, in a place where a number is valid.
            literal = draw(st.sampled_from(["NaN", "-Infinity", "1e999", "-1E+400", "1" * 4400, "1e-400", "-0.0"]))
            number = r'"(total_s|hashing_s|seed|max_tokens)": -?[0-9][0-9.eE+-]*'
            text = re.sub(number, lambda m, lit=literal: f'"{m[1]}": {lit}', text, count=1)
    return text.encode("utf-8", errors=draw(st.sampled_from(["surrogatepass", "replace"])))


_runner_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z", fullmatch=True)
_valid_text = st.text(_any_char, max_size=300)
_count = st.integers(min_value=0, max_value=2**80)
_seconds = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)


@st.composite
def valid_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A base document with its free-form fields redrawn within the schema's limits."""
    doc = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    doc["runner"]["name"] = draw(_runner_names)
    doc["reasons"] = draw(st.lists(_valid_text, max_size=10))
    doc["reproduce"] = draw(_valid_text)
    doc["ds4ci_version"] = draw(st.text(_any_char, max_size=64))
    doc["timings"]["total_s"] = draw(_seconds)
    doc["timings"]["hashing_s"] = draw(_seconds | st.integers(0, 10**6))
    doc["settings"]["seed"] = draw(st.integers(min_value=-(2**80), max_value=2**80))
    doc["settings"]["max_tokens"] = draw(st.integers(min_value=2, max_value=2**40))
    doc["policy"]["common"] = draw(st.dictionaries(_text, _valid_text, max_size=5))
    for width in doc["widths"]:
        width["reasons"] = draw(st.lists(_valid_text, max_size=3))
        for prompt in width["prompts"]:
            for key in ("steps", "matched", "offered", "tokens_target", "tokens_spec"):
                prompt[key] = draw(st.none() | _count)
    if doc["identities"]["target"] is not None:
        doc["identities"]["target"]["path"] = draw(_valid_text)
        doc["identities"]["target"]["size"] = draw(_count)
    return doc


# --- properties ---------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_validate_or_raise_results_error(data: bytes) -> None:
    check_loads(data)


@FUZZ
@given(jsonish_text, st.sampled_from(["utf-8", "utf-16", "latin-1"]))
def test_jsonish_text_validates_or_raises_results_error(text: str, codec: str) -> None:
    check_loads(text.encode(codec, errors="surrogatepass" if codec.startswith("utf") else "replace"))


@FUZZ
@given(json_values)
def test_arbitrary_json_values_validate_or_raise_results_error(value: Any) -> None:
    check_loads(json.dumps(value, allow_nan=True).encode("utf-8", errors="surrogatepass"))


@FUZZ
@given(mutated_documents())
def test_mutated_documents_validate_or_raise_results_error(data: bytes) -> None:
    check_loads(data)


@FUZZ
@given(valid_documents(), st.booleans())
def test_valid_documents_round_trip(doc: dict[str, Any], ascii_only: bool) -> None:
    data = json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", errors="surrogatepass")
    if not ascii_only and any("\ud800" <= c <= "\udfff" for c in json.dumps(doc, ensure_ascii=False)):
        # Raw lone surrogates are not UTF-8; the loader must refuse them, and only with ResultsError.
        with pytest.raises(ResultsError, match="not UTF-8"):
            results.loads(data)
        return
    loaded = check_loads(data)
    assert loaded == doc


def test_every_base_document_is_valid_and_round_trips(tmp_path: Path) -> None:
    # The mutation fuzzer is only meaningful if it starts from documents the loader accepts.
    for name, doc in BASES.items():
        assert check_loads(json.dumps(doc).encode()) == doc, name
        results.write_atomic(tmp_path / name, doc)
        assert results.load(tmp_path / name) == doc


# --- regression tests for the bugs the fuzzer found (docs/fuzzing.md, "Findings") ------------


def _with_literal(key: str, literal: str) -> str:
    """pass.json with one numeric field written as a literal json.dumps cannot produce."""
    doc = copy.deepcopy(BASES["pass.json"])
    section = "timings" if key.endswith("_s") else "settings"
    doc[section][key] = 424242
    text = json.dumps(doc)
    assert text.count("424242") == 1
    return text.replace("424242", literal)


def test_literal_helper_makes_valid_documents() -> None:
    # Guards the regression tests below: with an ordinary literal the document is valid, so only the
    # literal itself can be what they observe.
    assert results.loads(_with_literal("seed", "9" * 40).encode())["settings"]["seed"] == int("9" * 40)
    assert results.loads(_with_literal("total_s", "1e300").encode())["timings"]["total_s"] == 1e300


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"a":' * 50_000], ids=["array", "object"])
def test_deep_nesting_is_a_results_error(data: bytes) -> None:
    with pytest.raises(ResultsError):
        results.loads(data)


def test_huge_integer_literal_is_a_results_error() -> None:
    text = _with_literal("seed", "9" * 5000)
    with pytest.raises(ResultsError):
        results.loads(text.encode())


def test_float_overflow_is_a_results_error() -> None:
    text = _with_literal("total_s", "1e400")
    with pytest.raises(ResultsError):
        results.loads(text.encode())


@pytest.mark.parametrize("text", ['{"schema": NaN}', '{"schema": 1, "schema": 2}'], ids=["nan", "duplicate"])
def test_rejection_names_the_file(text: str) -> None:
    # report/publish read several runners' files; the message must say which one was bad.
    with pytest.raises(ResultsError, match=r"runner-a/results\.json"):
        results.loads(text.encode(), "runner-a/results.json")


def test_malformed_timestamp_is_a_results_error() -> None:
    doc = copy.deepcopy(BASES["pass.json"])
    doc["started_at"] = "yesterday, roughly"
    with pytest.raises(ResultsError, match="started_at"):
        results.loads(json.dumps(doc).encode())
