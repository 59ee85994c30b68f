"""FULL_TRANSITIVE compatibility of the shipped schema versions, shown with data.

Every version writes records built from its own schema (``samples``: every
union branch and enum symbol appears); every version reads them back by Avro
schema resolution. A reader must get every field both versions share unchanged and
every field only it has at its declared default.
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
        samples = sample_records(writer.schema_json, records_per_version)
        writer_fields = {f["name"] for f in json.loads(writer.schema_json)["fields"]}
        for reader in catalog.versions:
            reader_fields = json.loads(reader.schema_json)["fields"]
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
                _compare(
                    written=record,
                    read=got,
                    reader_fields=reader_fields,
                    writer_fields=writer_fields,
                    wv=writer.version,
                    rv=reader.version,
                )
            results.append(PairResult(writer.version, reader.version, len(samples)))
    return results


def _compare(
    *,
    written: dict[str, Any],
    read: dict[str, Any],
    reader_fields: list[dict[str, Any]],
    writer_fields: set[str],
    wv: int,
    rv: int,
) -> None:
    for field in reader_fields:
        name = field["name"]
        if name in writer_fields:
            expected = _normalise(written[name])
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


def _normalise(value: Any) -> Any:
    # Timestamps come back as datetimes; compare them as the millis written.
    if isinstance(value, datetime):
        return (value - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value
