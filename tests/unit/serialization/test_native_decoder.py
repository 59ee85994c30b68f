"""The native decoder against fastavro, the reference: the same records, the same errors.

Every message is given to two ``TurnEventDeserializer``s of the same catalog:
the project's (native decoder) and one whose plans keep fastavro (the path the
native decoder replaced). Each must give an equal record (floats compared by
their bits, dict keys in order) or raise the same ``SerializationError``
subclass, so the dead-letter reason does not change. Inputs: every valid event
of every shipped version of every record type in both framings, every
truncation, byte flips, extensions, insertions and random bytes.
"""

from __future__ import annotations

import io
import json
import random
import struct
from types import SimpleNamespace
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnaudit.errors import SerializationError
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization import native
from turnaudit.serialization.samples import sample_records
from turnaudit.serialization.schemas import (
    SchemaCatalog,
    decoding_schema,
    schema_from_json,
    shipped_catalog,
    shipped_record_names,
)
from turnaudit.serialization.wire import (
    ConfluentIdSerializer,
    SingleObjectSerializer,
    TurnEventDeserializer,
    UnusableSchemaError,
)

REGISTRY_BASE = 100  # registry id of version v: REGISTRY_BASE + v


class StandInRegistry:
    """``get_schema(id).schema_str`` for the shipped versions, as a registry answers."""

    def __init__(self, catalog: SchemaCatalog) -> None:
        self._by_id = {REGISTRY_BASE + s.version: s.schema_json for s in catalog.versions}

    def get_schema(self, schema_id: int) -> Any:
        return SimpleNamespace(schema_str=self._by_id[schema_id])


def deserializers(catalog: SchemaCatalog) -> tuple[TurnEventDeserializer, TurnEventDeserializer]:
    registry: Any = StandInRegistry(catalog)
    project = TurnEventDeserializer(catalog, registry=registry)
    reference = TurnEventDeserializer(catalog, registry=registry)
    reference._by_fp = {fp: _fastavro_only(p) for fp, p in reference._by_fp.items()}
    original = reference._resolve_registry_id
    reference._resolve_registry_id = lambda i: _fastavro_only(original(i))  # type: ignore[method-assign]
    return project, reference


def _fastavro_only(plan: Any) -> Any:
    plan.native = None
    return plan


def canonical(value: Any) -> Any:
    """Equality that sees float bits (NaN included), types and dict key order."""
    if isinstance(value, dict):
        return ("dict", [(k, canonical(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [canonical(v) for v in value])
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    return (type(value).__name__, value)


def outcome(decode: TurnEventDeserializer, payload: bytes) -> Any:
    try:
        got = decode(payload)
    except SerializationError as exc:
        return ("refused", type(exc).__name__)
    return (
        "decoded",
        canonical(got.event),
        got.writer_version,
        got.framing,
        got.writer_fingerprint,
    )


def turn_events(version: int, n: int) -> list[dict[str, Any]]:
    return list(TurnRuntimeSimulator(11 + version, schema_versions=(version,)).events(n))


def corpus(name: str, per_version: int) -> list[bytes]:
    """Valid messages of every shipped version of ``name``, in both framings."""
    catalog = shipped_catalog(name)
    out: list[bytes] = []
    for schema in catalog.versions:
        if name == "turn_event":
            records = turn_events(schema.version, per_version)
        else:
            records = sample_records(schema.schema_json, per_version)
        single = SingleObjectSerializer(schema)
        confluent = ConfluentIdSerializer(schema, REGISTRY_BASE + schema.version)
        out += [single(r) for r in records]
        out += [confluent(r) for r in records[: max(1, per_version // 4)]]
    return out


NAMES = shipped_record_names()
CORPORA = {name: corpus(name, 60) for name in NAMES}
PAIRS = {name: deserializers(shipped_catalog(name)) for name in NAMES}


def assert_same(name: str, payload: bytes) -> None:
    project, reference = PAIRS[name]
    assert outcome(project, payload) == outcome(reference, payload), payload.hex()


def test_every_shipped_schema_compiles_natively() -> None:
    for name in NAMES:
        project, reference = PAIRS[name]
        assert all(plan.native is not None for plan in project._by_fp.values()), name
        assert all(plan.native is None for plan in reference._by_fp.values()), name
        assert project.stats().fastavro_schemas == 0


@pytest.mark.parametrize("name", NAMES)
def test_every_valid_message_decodes_to_fastavros_record(name: str) -> None:
    for payload in CORPORA[name]:
        project, reference = PAIRS[name]
        got = outcome(project, payload)
        assert got[0] == "decoded"
        assert got == outcome(reference, payload)


@pytest.mark.parametrize("name", NAMES)
def test_every_truncation_is_refused_alike(name: str) -> None:
    for payload in CORPORA[name][::3]:
        for cut in range(len(payload)):
            assert_same(name, payload[:cut])


@pytest.mark.parametrize("name", NAMES)
def test_every_single_byte_extension_is_refused_alike(name: str) -> None:
    for payload in CORPORA[name][::5]:
        for extra in (b"\x00", b"\x01", b"\x80", b"\xff"):
            assert_same(name, payload + extra)


PROPERTY = settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(data=st.data())
def test_byte_flips_give_the_same_record_or_the_same_error(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    payload = bytearray(data.draw(st.sampled_from(CORPORA[name])))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] ^= data.draw(st.integers(1, 255))
    assert_same(name, bytes(payload))


@PROPERTY
@given(data=st.data())
def test_body_flips_keep_the_framing_and_reach_the_decoder(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    payload = bytearray(data.draw(st.sampled_from(CORPORA[name])))
    start = 10 if payload[0] == 0xC3 else 5
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(start, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    assert_same(name, bytes(payload))


@PROPERTY
@given(data=st.data())
def test_extensions_and_insertions_give_the_same_outcome(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    payload = data.draw(st.sampled_from(CORPORA[name]))
    extra = data.draw(st.binary(min_size=1, max_size=40))
    at = data.draw(st.integers(0, len(payload)))
    assert_same(name, payload + extra)
    assert_same(name, payload[:at] + extra + payload[at:])


@PROPERTY
@given(data=st.data())
def test_random_bodies_behind_a_valid_header_give_the_same_outcome(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    payload = data.draw(st.sampled_from(CORPORA[name]))
    header = payload[:10] if payload[0] == 0xC3 else payload[:5]
    assert_same(name, header + data.draw(st.binary(max_size=300)))


@PROPERTY
@given(payload=st.binary(max_size=200))
def test_random_bytes_give_the_same_outcome(payload: bytes) -> None:
    for name in NAMES:
        assert_same(name, payload)


# Every Avro type the compiler knows, beyond what the shipped schemas use, fed
# random bytes straight to both decoders (no framing).
EVERY_TYPE = {
    "type": "record",
    "name": "Everything",
    "namespace": "t.every",
    "fields": [
        {"name": "n", "type": "null"},
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["R", "G", "B"]}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long", "Four"]}},
        {
            "name": "a",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Item",
                    "fields": [
                        {"name": "c", "type": "t.every.Color"},
                        {"name": "u", "type": ["string", "double", "null", "boolean"]},
                    ],
                },
            },
        },
        {"name": "r", "type": ["null", "Item"]},
    ],
}


@settings(max_examples=3000, deadline=None)
@given(body=st.binary(max_size=120))
def test_every_type_decodes_like_fastavro_on_random_bytes(body: bytes) -> None:
    decoding = decoding_schema(json.dumps(EVERY_TYPE))
    decoder = native.compile_decoder(decoding)
    stream = io.BytesIO(body)
    try:
        expected: Any = (
            "decoded",
            canonical(fastavro.schemaless_reader(stream, decoding.parsed, None)),
            stream.tell(),
        )
    except Exception:
        expected = ("refused",)
    try:
        record, end = decoder.decode_prefix(body, 0)
        got: Any = ("decoded", canonical(record), end)
    except (native.DecodeError, UnicodeDecodeError):
        got = ("refused",)
    assert got == expected, body.hex()


def test_the_native_decoder_refuses_trailing_bytes_and_says_where_the_record_ended() -> None:
    payload = CORPORA["turn_event"][0]
    plan = PAIRS["turn_event"][0]._by_fp[payload[2:10]]
    record, end = plan.native.decode_prefix(payload + b"\x00\x00", 10)
    assert end == len(payload)
    assert record == plan.native(payload, 10)
    with pytest.raises(native.TrailingBytesError) as refused:
        plan.native(payload + b"\x00\x00", 10)
    assert refused.value.args == (2, len(payload))


def test_a_schema_the_compiler_refuses_is_read_by_fastavro_and_counted() -> None:
    # A logical type fastavro turns into a Python object (date): not compiled.
    raw = {
        "type": "record",
        "name": "Dated",
        "namespace": "t.dated",
        "fields": [
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "note", "type": "string"},
        ],
    }
    schema = schema_from_json(json.dumps(raw), name="dated", version=1)
    with pytest.raises(native.UnsupportedSchemaError):
        native.compile_decoder(decoding_schema(schema.schema_json))
    decode = TurnEventDeserializer(SchemaCatalog("dated", (schema,)))
    assert decode.stats().native_schemas == 0
    assert decode.stats().fastavro_schemas == 1
    payload = SingleObjectSerializer(schema)({"day": 19_000, "note": "x"})
    event = decode(payload).event
    assert str(event["day"]) == "2022-01-08"
    assert event["note"] == "x"


def test_recursive_and_foreign_schemas_go_to_fastavro_and_are_counted() -> None:
    recursive = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "value", "type": "long"},
            {"name": "next", "type": ["null", "Node"]},
        ],
    }
    with pytest.raises(native.UnsupportedSchemaError, match="recursive"):
        native.compile_decoder(decoding_schema(json.dumps(recursive)))
    # A future TurnEvent version learned at run time: resolved by fastavro.
    catalog = shipped_catalog()
    future = json.loads(catalog.latest.schema_json)
    future["fields"].append({"name": "extra", "type": "string", "default": ""})
    future_json = json.dumps(future)
    fp = schema_from_json(future_json, name="turn_event", version=-1).fingerprint
    decode = TurnEventDeserializer(catalog, resolver=lambda f: future_json if f == fp else None)
    before = decode.stats()
    record = turn_events(3, 1)[0]
    writer = schema_from_json(future_json, name="turn_event", version=4)
    got = decode(SingleObjectSerializer(writer)({**record, "extra": "x"}))
    assert got.event["sequence"] == record["sequence"]
    assert "extra" not in got.event
    assert decode.stats().fastavro_schemas == before.fastavro_schemas + 1
    assert decode.stats().native_schemas == before.native_schemas


def test_a_missing_native_module_is_one_clear_error() -> None:
    import subprocess  # noqa: PLC0415 - this test only
    import sys  # noqa: PLC0415

    code = (
        "import sys; sys.modules['turnaudit._native'] = None\n"
        "try:\n    import turnaudit.serialization.native\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "make setup" in out
    assert "cargo" in out


def test_unusable_schema_errors_are_unchanged() -> None:
    # Not a record: refused before any decoder is involved, on both paths.
    decode = TurnEventDeserializer(shipped_catalog(), resolver=lambda fp: '"string"')
    with pytest.raises(UnusableSchemaError):
        decode(b"\xc3\x01" + bytes(8) + b"\x00")


def test_random_messages_of_every_version_agree_in_bulk() -> None:
    rng = random.Random(23)
    for name in NAMES:
        for payload in CORPORA[name]:
            body = bytearray(payload)
            for _ in range(3):
                body[rng.randrange(len(body))] = rng.randrange(256)
            assert_same(name, bytes(body))
