"""The typed records (ds4ci/records.py) describe exactly what the v1 JSON Schema allows.

``differences`` walks the schema and the TypedDicts side by side: every property on one side must
be on the other, required in the schema exactly when required in the record, with a compatible
type (enums and consts as ``Literal`` of the same values, ``oneOf`` with null as ``X | None``, open
objects as ``dict[str, X]``). The negative cases change a copy of the schema in each way a field
can drift and check that the walk reports it, so the test cannot pass vacuously.
"""

import copy
import sys
import types
import typing
from typing import Any, Literal, TypedDict, Union

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required
else:  # Python 3.10
    from typing_extensions import NotRequired, Required

import pytest

from ds4ci import records
from ds4ci.evidence import results

_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (float,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        node = {**root["$defs"][name], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing.is_typeddict(tp)


def _union_members(tp: Any) -> list[Any]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return list(typing.get_args(tp))
    return [tp]


def _literal_values(tp: Any) -> set[Any] | None:
    """The values of a Literal (or a union of Literals), None when ``tp`` is not one."""
    members = _union_members(tp)
    if not all(typing.get_origin(m) is Literal for m in members):
        return None
    return {v for m in members for v in typing.get_args(m)}


def differences(node: dict[str, Any], tp: Any, where: str, root: dict[str, Any]) -> list[str]:
    """Every way the Python type ``tp`` disagrees with the schema ``node`` (empty when they agree)."""
    node = _resolve(node, root)
    if "oneOf" in node:
        return _one_of(node["oneOf"], tp, where, root)
    if type(None) in _union_members(tp) and node.get("type") != "null":
        return [f"{where}: schema nullable=False, record has {tp!r}"]
    if "enum" in node or "const" in node:
        want = set(node["enum"]) if "enum" in node else {node["const"]}
        got = _literal_values(tp)
        return [] if got == want else [f"{where}: schema allows {sorted(map(str, want))}, record has {tp!r}"]
    kind = node.get("type")
    if kind in _SCALARS:
        return [] if tp in _SCALARS[kind] else [f"{where}: schema type {kind}, record has {tp!r}"]
    if kind == "array":
        if typing.get_origin(tp) is not list:
            return [f"{where}: schema array, record has {tp!r}"]
        return differences(node.get("items", {}), typing.get_args(tp)[0], f"{where}[]", root)
    if kind == "object":
        return _object(node, tp, where, root)
    return [f"{where}: schema node without a type the walk knows: {node!r}"]


def _one_of(options: list[dict[str, Any]], tp: Any, where: str, root: dict[str, Any]) -> list[str]:
    resolved = [_resolve(o, root) for o in options]
    nullable = any(o.get("type") == "null" for o in resolved)
    rest = [o for o in resolved if o.get("type") != "null"]
    members = _union_members(tp)
    if nullable != (type(None) in members):
        return [f"{where}: schema nullable={nullable}, record has {tp!r}"]
    others = [m for m in members if m is not type(None)]
    if len(rest) != 1 or not others:
        return [f"{where}: oneOf with {len(rest)} non-null options, record has {tp!r}"]
    inner = others[0] if len(others) == 1 else Union[tuple(others)]  # noqa: UP007 - built at run time
    return differences(rest[0], inner, where, root)


def _object(node: dict[str, Any], tp: Any, where: str, root: dict[str, Any]) -> list[str]:
    if "properties" not in node:
        if typing.get_origin(tp) is not dict or typing.get_args(tp)[0] is not str:
            return [f"{where}: schema open object, record has {tp!r}"]
        extra = node.get("additionalProperties", True)
        value = typing.get_args(tp)[1]
        if extra is True:
            return [] if value is object else [f"{where}: schema allows any value, record has {value!r}"]
        return differences(extra, value, f"{where}{{}}", root)
    if not _is_typeddict(tp):
        return [f"{where}: schema object with properties, record has {tp!r}"]
    if node.get("additionalProperties", True) is not False:
        return [f"{where}: schema object with properties must set additionalProperties: false"]
    return _fields(node, tp, where, root)


def _fields(node: dict[str, Any], tp: Any, where: str, root: dict[str, Any]) -> list[str]:
    hints = typing.get_type_hints(tp, include_extras=True)
    props: dict[str, Any] = node["properties"]
    required = set(node.get("required", []))
    found = [f"{where}.{k}: in the schema, not in {tp.__name__}" for k in props if k not in hints]
    found += [f"{where}.{k}: in {tp.__name__}, not in the schema" for k in hints if k not in props]
    for key in props.keys() & hints.keys():
        hint = hints[key]
        while typing.get_origin(hint) in (NotRequired, Required):
            hint = typing.get_args(hint)[0]
        is_required = key in tp.__required_keys__
        if is_required != (key in required):
            found.append(f"{where}.{key}: required in schema={key in required}, in {tp.__name__}={is_required}")
        found += differences(props[key], hint, f"{where}.{key}", root)
    return found


def test_records_match_the_schema() -> None:
    schema = results.schema()
    assert differences(schema, records.Results, "results", schema) == []


def _add_property(s: dict[str, Any]) -> None:
    s["$defs"]["prompt_result"]["properties"]["new_counter"] = {"$ref": "#/$defs/count"}


def _remove_property(s: dict[str, Any]) -> None:
    del s["properties"]["target_only"]["properties"]["deterministic"]
    s["properties"]["target_only"]["required"].remove("deterministic")


def _make_optional(s: dict[str, Any]) -> None:
    s["$defs"]["width_result"]["required"].remove("server_log")


def _make_required(s: dict[str, Any]) -> None:
    s["required"].append("warnings")


def _change_type(s: dict[str, Any]) -> None:
    s["$defs"]["check"]["properties"]["duration_s"] = {"type": "string"}


def _extend_enum(s: dict[str, Any]) -> None:
    s["$defs"]["verdict"]["enum"].append("skipped")


def _drop_null(s: dict[str, Any]) -> None:
    s["$defs"]["prompt_result"]["properties"]["mismatch"] = {"$ref": "#/$defs/mismatch"}


def _close_open_object(s: dict[str, Any]) -> None:
    s["properties"]["policy"]["properties"]["common"]["additionalProperties"] = {"type": "integer"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_add_property, "new_counter: in the schema, not in PromptResult"),
        (_remove_property, "deterministic: in TargetOnlyResult, not in the schema"),
        (_make_optional, "server_log: required in schema=False"),
        (_make_required, "warnings: required in schema=True"),
        (_change_type, "duration_s: schema type string"),
        (_extend_enum, "skipped"),
        (_drop_null, "mismatch: schema nullable=False"),
        (_close_open_object, "common{}: schema type integer"),
    ],
)
def test_a_field_on_one_side_only_is_reported(change: Any, expected: str) -> None:
    schema = copy.deepcopy(results.schema())
    change(schema)
    found = differences(schema, records.Results, "results", schema)
    assert any(expected in line for line in found), found


class _WithExtra(TypedDict):  # no deferred annotations in this module: NotRequired is seen here
    name: str
    role: Literal["gate", "negative-control"]
    negative_control_for: NotRequired[str | None]
    extra: int


def test_a_record_field_missing_from_the_schema_is_reported() -> None:
    schema = results.schema()
    found = differences(schema["properties"]["runner"], _WithExtra, "runner", schema)
    assert found == ["runner.extra: in _WithExtra, not in the schema"]
