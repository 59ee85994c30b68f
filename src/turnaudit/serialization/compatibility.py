"""FULL_TRANSITIVE compatibility of the shipped schema versions, shown with data.

Every version writes records built from its own schema (``samples``: every
union branch and enum symbol appears, and the per-field verdicts agree with the
bundle as contract 4 requires); every version reads them back by Avro schema
resolution. A reader must get every field both versions share unchanged and
every field only it has at its declared default, and the per-field verdicts
a v1 reader relies on (ADR-0035) must mean what the bundle says, except for
the one loss the schemas document: v2 does not write them.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import fastavro

from turnaudit.errors import SchemaCompatibilityError
from turnaudit.serialization.samples import sample_records
from turnaudit.serialization.schemas import SchemaCatalog

# (writer, reader) pairs where a reader's top-level safety/ethics verdicts are
# its defaults (null) although the bundle has them: v2 did not write them, v3,
# v4 and v5 write them again (documented in the .avsc files and the README).
DOCUMENTED_LOSSES: dict[tuple[int, int], tuple[str, ...]] = {
    (2, 1): ("safety_verdict", "ethics_verdict"),
    (2, 3): ("safety_verdict", "ethics_verdict"),
    (2, 4): ("safety_verdict", "ethics_verdict"),
    (2, 5): ("safety_verdict", "ethics_verdict"),
}
BACK_COMPAT_VERDICTS = ("safety_verdict", "ethics_verdict")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class PairResult:
    writer: int
    reader: int
    records: int


def check_full_transitive(
    catalog: SchemaCatalog, records_per_version: int = 300
) -> list[PairResult]:
    """Raise ``SchemaCompatibilityError`` unless every version reads every other's data."""
    results: list[PairResult] = []
    for writer in catalog.versions:
        samples = [_agreeing(r) for r in sample_records(writer.schema_json, records_per_version)]
        writer_fields = {f["name"] for f in json.loads(writer.schema_json)["fields"]}
        for reader in catalog.versions:
            reader_fields = json.loads(reader.schema_json)["fields"]
            reader_records = _named_records(json.loads(reader.schema_json))
            for record in samples:
                buf = io.BytesIO()
                fastavro.schemaless_writer(buf, writer.parsed, record)
                buf.seek(0)
                try:
                    got = cast(
                        dict[str, Any],
                        fastavro.schemaless_reader(buf, writer.parsed, reader.parsed),
                    )
                except Exception as exc:  # fastavro raises several types on resolution failure
                    raise SchemaCompatibilityError(
                        f"v{reader.version} cannot read data written with v{writer.version}: {exc}"
                    ) from exc
                _check_meaning(got, writer.version, reader.version)
                _compare(
                    written=record,
                    read=got,
                    reader_fields=reader_fields,
                    writer_fields=writer_fields,
                    wv=writer.version,
                    rv=reader.version,
                    reader_records=reader_records,
                )
            results.append(PairResult(writer.version, reader.version, len(samples)))
    return results


def _agreeing(record: dict[str, Any]) -> dict[str, Any]:
    """A TurnEvent keeps contract 4: its per-field verdicts are the bundle's."""
    bundle = record.get("verdicts")
    if isinstance(bundle, dict):
        for name in BACK_COMPAT_VERDICTS:
            if name in record and name in bundle:
                record[name] = bundle[name]
    return record


def _compare(
    *,
    written: dict[str, Any],
    read: dict[str, Any],
    reader_fields: list[dict[str, Any]],
    writer_fields: set[str],
    wv: int,
    rv: int,
    reader_records: dict[str, Any] | None = None,
) -> None:
    for field in reader_fields:
        name = field["name"]
        if name in writer_fields:
            expected = _normalise(_as_read(written[name], field["type"], reader_records or {}))
        elif "default" in field:
            expected = field["default"]
        else:
            raise SchemaCompatibilityError(
                f"v{rv} field {name!r} has no default and v{wv} does not write it"
            )
        actual = _normalise(read[name])
        if actual != expected:
            raise SchemaCompatibilityError(
                f"v{rv} reading v{wv} data: field {name!r} is {actual!r}, expected {expected!r}"
            )


def _check_meaning(read: dict[str, Any], wv: int, rv: int) -> None:
    """The back-compat verdicts a reader gets equal the bundle, or are a documented loss."""
    lost = DOCUMENTED_LOSSES.get((wv, rv), ())
    for name in BACK_COMPAT_VERDICTS:
        if name not in read:
            continue
        expected = None if name in lost else read["verdicts"][name]
        if read[name] != expected:
            raise SchemaCompatibilityError(
                f"v{rv} reading v{wv} data: {name} is {read[name]!r} but the bundle says "
                f"{read['verdicts'][name]!r}"
                + (" (a documented loss expects null)" if name in lost else "")
            )


def _named_records(schema: Any, found: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every record type a schema defines, by name, so a nested record can be resolved."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            _named_records(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            found[schema["name"]] = schema
            for field in schema["fields"]:
                _named_records(field["type"], found)
        for key in ("items", "values"):
            if key in schema:
                _named_records(schema[key], found)
        if isinstance(schema.get("type"), dict | list):
            _named_records(schema["type"], found)
    return found


def _as_read(value: Any, reader_type: Any, records: dict[str, Any]) -> Any:
    """A written value as the reader's schema resolves it: inside nested records, fields
    the reader lacks are dropped and fields the writer lacks take the reader's default
    (fastavro refuses a reader field without one before this is reached)."""
    if isinstance(reader_type, str) and reader_type in records:
        reader_type = records[reader_type]
    if isinstance(reader_type, list):
        branches = [b for b in reader_type if b != "null"]
        # A value in a union of one type besides null resolves as that type.
        reader_type = branches[0] if value is not None and len(branches) == 1 else None
    kind = reader_type.get("type") if isinstance(reader_type, dict) else None
    resolved = value
    if kind == "record" and isinstance(value, dict):
        resolved = {
            f["name"]: _as_read(value[f["name"]], f["type"], records)
            if f["name"] in value
            else f.get("default")
            for f in reader_type["fields"]
        }
    elif kind == "array" and isinstance(value, list):
        resolved = [_as_read(v, reader_type["items"], records) for v in value]
    elif kind == "map" and isinstance(value, dict):
        resolved = {k: _as_read(v, reader_type["values"], records) for k, v in value.items()}
    elif isinstance(kind, dict | list):
        resolved = _as_read(value, kind, records)
    return resolved


def _normalise(value: Any) -> Any:
    # Timestamps come back as datetimes; compare them as the millis written.
    if isinstance(value, datetime):
        return (value - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value
