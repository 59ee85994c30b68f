"""Both wire formats, every shipped version, and clear errors for everything else."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form

from turnaudit.errors import (
    SchemaCompatibilityError,
    SchemaNotFoundError,
    SerializationError,
    UnknownFramingError,
)
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.compatibility import check_full_transitive
from turnaudit.serialization.framing import MAX_MILLIS, MIN_MILLIS
from turnaudit.serialization.schemas import (
    SchemaCatalog,
    decoding_schema,
    schema_from_json,
    shipped_catalog,
)
from turnaudit.serialization.wire import Framing, SingleObjectSerializer, TurnEventDeserializer

CATALOG = shipped_catalog()


def events(version: int, n: int = 50) -> list[dict[str, Any]]:
    out = []
    for i, e in enumerate(TurnRuntimeSimulator(5, schema_versions=(version,)).events(n)):
        e["event_id"], e["sequence"] = f"e{i}", i
        out.append(e)
    return out


def as_written(record: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(record)
    out["occurred_at"] = record["occurred_at"]
    return out


def millis(decoded: dict[str, Any]) -> dict[str, Any]:
    # The decoder reads timestamp-millis as the long on the wire: epoch milliseconds.
    assert type(decoded["occurred_at"]) is int
    return decoded


def test_shipped_versions_are_one_to_five_with_distinct_fingerprints() -> None:
    assert [s.version for s in CATALOG.versions] == [1, 2, 3, 4, 5]
    assert len({s.fingerprint for s in CATALOG.versions}) == 5
    assert all(len(s.fingerprint) == 8 for s in CATALOG.versions)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_single_object_round_trip(version: int) -> None:
    schema = CATALOG.version(version)
    serialize = SingleObjectSerializer(schema)
    decode = TurnEventDeserializer(CATALOG)
    for record in events(version):
        payload = serialize(record)
        assert payload[:2] == b"\xc3\x01"
        assert payload[2:10] == schema.fingerprint
        decoded = decode(payload)
        assert decoded.framing is Framing.SINGLE_OBJECT
        assert decoded.writer_version == version
        got = millis(decoded.event)
        for name, value in record.items():
            assert got[name] == value, name


def test_v1_data_is_read_into_the_current_shape_with_defaults() -> None:
    record = events(1, 1)[0]
    decoded = TurnEventDeserializer(CATALOG)(SingleObjectSerializer(CATALOG.version(1))(record))
    assert decoded.event["tool_steps"] == []  # v2's new field at its default
    # The writer's back-compat fields stay readable for contract 4.
    assert decoded.event["safety_verdict"] == record["safety_verdict"]


def test_confluent_message_without_a_registry_is_a_clear_error() -> None:
    with pytest.raises(SchemaNotFoundError, match="no Schema Registry is configured"):
        TurnEventDeserializer(CATALOG)(b"\x00\x00\x00\x00\x07" + b"\x02")


@pytest.mark.parametrize("payload", [b"", b"hello world", b"\xc3", b"\x7b\x22json\x22"])
def test_messages_in_neither_framing_are_refused(payload: bytes) -> None:
    with pytest.raises(UnknownFramingError):
        TurnEventDeserializer(CATALOG)(payload)


def test_unknown_fingerprint_is_refused_without_a_resolver() -> None:
    payload = b"\xc3\x01" + b"\x01" * 8 + b"\x00"
    with pytest.raises(SchemaNotFoundError, match="0101010101010101"):
        TurnEventDeserializer(CATALOG)(payload)


def test_truncated_body_is_a_serialization_error() -> None:
    payload = SingleObjectSerializer(CATALOG.latest)(events(2, 1)[0])
    with pytest.raises(SerializationError):
        TurnEventDeserializer(CATALOG)(payload[: len(payload) // 2])


def test_trailing_bytes_are_a_serialization_error() -> None:
    payload = SingleObjectSerializer(CATALOG.latest)(events(2, 1)[0])
    with pytest.raises(SerializationError, match="trailing"):
        TurnEventDeserializer(CATALOG)(payload + b"\x00\x00")


def test_a_record_that_does_not_fit_the_schema_is_a_serialization_error() -> None:
    record = events(2, 1)[0]
    record["path"] = "SIDEWAYS"
    with pytest.raises(SerializationError, match="does not fit"):
        SingleObjectSerializer(CATALOG.latest)(record)


def future_writer() -> str:
    """A newer writer (as a future producer would ship): one extra field."""
    raw = json.loads(CATALOG.latest.schema_json)
    raw["fields"].append({"name": "region", "type": "string", "default": "eu"})
    return json.dumps(raw)


def test_a_foreign_fingerprint_resolves_through_the_schemas_topic_resolver() -> None:
    future = schema_from_json(future_writer(), name="turn_event", version=6)
    record = events(2, 1)[0]
    record["verdicts"]["schema_version"] = 5
    record["region"] = "us"
    payload = SingleObjectSerializer(future)(record)
    asked: list[bytes] = []

    def resolver(fp: bytes) -> str | None:
        asked.append(fp)
        return future_writer() if fp == future.fingerprint else None

    decode = TurnEventDeserializer(CATALOG, resolver=resolver)
    decoded = decode(payload)
    decode(payload)
    assert asked == [future.fingerprint]  # resolved once, then cached
    assert decoded.writer_version == 5
    assert "region" not in decoded.event  # read into today's reader shape
    assert decoded.event["session_id"] == record["session_id"]


def test_schemas_check_passes_for_the_shipped_versions() -> None:
    results = check_full_transitive(CATALOG, records_per_version=100)
    versions = (1, 2, 3, 4, 5)
    assert {(r.writer, r.reader) for r in results} == {(w, r) for w in versions for r in versions}
    assert all(r.records == 100 for r in results)


def test_schemas_check_fails_for_a_version_adding_a_field_without_default() -> None:
    raw = json.loads(CATALOG.latest.schema_json)
    raw["fields"].append({"name": "region", "type": "string"})
    broken = schema_from_json(json.dumps(raw), name="turn_event", version=6)
    with pytest.raises(SchemaCompatibilityError, match="region"):
        check_full_transitive(SchemaCatalog("turn_event", (*CATALOG.versions, broken)), 20)


def test_schemas_check_fails_for_a_changed_field_type() -> None:
    raw = json.loads(CATALOG.latest.schema_json)
    for field in raw["fields"]:
        if field["name"] == "vault_hits":
            field["type"] = "string"
    broken = schema_from_json(json.dumps(raw), name="turn_event", version=6)
    with pytest.raises(SchemaCompatibilityError):
        check_full_transitive(SchemaCatalog("turn_event", (*CATALOG.versions, broken)), 20)


def test_fingerprint_is_crc64_avro_of_the_canonical_form() -> None:
    # Reference implementation from the Avro specification.
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)

    def rabin(data: bytes) -> int:
        fp = empty
        for byte in data:
            fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
        return fp

    for schema in CATALOG.versions:
        canonical = fastavro.schema.to_parsing_canonical_form(schema.parsed)
        assert schema.fingerprint == rabin(canonical.encode()).to_bytes(8, "little")


def test_encoded_body_is_plain_avro() -> None:
    record = events(2, 1)[0]
    payload = SingleObjectSerializer(CATALOG.latest)(record)
    body = io.BytesIO(payload[10:])
    got = fastavro.schemaless_reader(body, CATALOG.latest.parsed)
    assert got["event_id"] == record["event_id"]


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_decoding_schema_reads_timestamp_millis_as_the_long_with_the_same_fingerprint(
    version: int,
) -> None:
    schema = CATALOG.version(version)
    decoding = decoding_schema(schema.schema_json)
    assert decoding.long_time_fields == ("occurred_at",)
    # Only the logical type goes: canonical form and fingerprint are the writer's.
    assert to_parsing_canonical_form(decoding.parsed) == to_parsing_canonical_form(schema.parsed)
    assert schema_from_json(schema.schema_json, name="turn_event", version=version).fingerprint == (
        schema.fingerprint
    )
    record = events(version, 1)[0]
    decoded = TurnEventDeserializer(CATALOG)(SingleObjectSerializer(schema)(record))
    assert decoded.event["occurred_at"] == record["occurred_at"]
    assert type(decoded.event["occurred_at"]) is int


@pytest.mark.parametrize(
    ("occurred_at", "decodes"),
    [
        (MIN_MILLIS, True),
        (MAX_MILLIS, True),
        (0, True),
        (MIN_MILLIS - 1, False),
        (MAX_MILLIS + 1, False),
        (1_764_000_000_000_000, False),  # microseconds in a millis field
    ],
)
def test_a_timestamp_a_date_cannot_hold_does_not_decode(occurred_at: int, decodes: bool) -> None:
    record = events(3, 1)[0] | {"occurred_at": occurred_at}
    payload = SingleObjectSerializer(CATALOG.version(3))(record)
    decode = TurnEventDeserializer(CATALOG)
    if decodes:
        assert decode(payload).event["occurred_at"] == occurred_at
        return
    with pytest.raises(SerializationError, match=r"OverflowError.*beyond the range of a date"):
        decode(payload)


def test_a_foreign_writer_with_timestamp_millis_resolves_to_the_long_too() -> None:
    schema = json.loads(CATALOG.latest.schema_json)
    schema["fields"].append({"name": "extra", "type": "string", "default": ""})
    foreign = schema_from_json(json.dumps(schema), name="turn_event", version=-1)
    record = events(3, 1)[0] | {"extra": "x"}
    payload = b"\xc3\x01" + foreign.fingerprint + fastavro_body(foreign.parsed, record)
    decode = TurnEventDeserializer(CATALOG, resolver=lambda fp: json.dumps(schema))
    assert decode(payload).event["occurred_at"] == record["occurred_at"]


def fastavro_body(parsed: Any, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, record)
    return buf.getvalue()
