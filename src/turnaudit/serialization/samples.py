"""Sample records for a schema, built from the schema alone.

Used to show compatibility with data: record ``i`` takes union branch,
enum symbol and array length by ``i`` (offset per field), so a few hundred
records put every branch and every symbol on the wire. Values are exact in
Avro (no NaN, millisecond timestamps), so what is read back can be compared
with what was written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from turnaudit.serialization.schemas import AvroRecord, NamedTypes

_TIMESTAMP_BASE_MS = 1_700_000_000_000


def sample_records(schema_json: str, count: int) -> list[AvroRecord]:
    raw = json.loads(schema_json)
    named: NamedTypes = {}
    _register(raw, named, raw.get("namespace", "") if isinstance(raw, dict) else "")
    records = [_value(raw, i, named) for i in range(count)]
    if not all(isinstance(r, dict) for r in records):
        raise ValueError("the schema is not a record schema")
    return records


def _register(schema: Any, named: NamedTypes, namespace: str) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _register(branch, named, namespace)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        ns = schema.get("namespace", namespace)
        name = schema["name"]
        named[name] = schema
        if "." not in name and ns:
            named[f"{ns}.{name}"] = schema
        for field in schema.get("fields", ()):
            _register(field["type"], named, ns)
    elif kind == "array":
        _register(schema["items"], named, namespace)
    elif kind == "map":
        _register(schema["values"], named, namespace)
    elif isinstance(kind, dict | list):
        _register(kind, named, namespace)


def _value(schema: Any, i: int, named: NamedTypes) -> Any:  # noqa: PLR0911 - one per kind
    if isinstance(schema, list):
        return _value(schema[i % len(schema)], i // len(schema) + i, named)
    if isinstance(schema, str):
        if schema in named:
            return _value(named[schema], i, named)
        return _primitive(schema, None, i)
    kind = schema["type"]
    if isinstance(kind, dict | list):
        return _value(kind, i, named)
    if kind in ("record", "error"):
        return {
            field["name"]: _value(field["type"], i + n, named)
            for n, field in enumerate(schema["fields"])
        }
    if kind == "enum":
        return schema["symbols"][(i * 7) % len(schema["symbols"])]
    if kind == "array":
        return [_value(schema["items"], i + j, named) for j in range(i % 3)]
    if kind == "map":
        return {f"k{j}": _value(schema["values"], i + j, named) for j in range(i % 3)}
    if kind == "fixed":
        return bytes([i % 256]) * int(schema["size"])
    if kind in named:
        return _value(named[kind], i, named)
    return _primitive(kind, schema.get("logicalType"), i)


_PRIMITIVES: dict[str, Callable[[int], Any]] = {
    "null": lambda i: None,
    "boolean": lambda i: i % 2 == 1,
    "int": lambda i: i % 100_000,
    "long": lambda i: i,
    "float": lambda i: i * 0.25,
    "double": lambda i: i * 0.25,
    "bytes": lambda i: bytes([i % 256]),
    "string": lambda i: f"s{i}",
}


def _primitive(kind: str, logical: str | None, i: int) -> Any:
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        millis = _TIMESTAMP_BASE_MS + i * 1000
        return millis if logical == "timestamp-millis" else millis * 1000
    if kind not in _PRIMITIVES:
        raise ValueError(f"unknown Avro type {kind!r}")
    return _PRIMITIVES[kind](i)
