"""The native encoder against fastavro, the reference: the same bytes, or the same error.

Every record is given to two serializers of the same writer schema: the
project's (native encoder, fastavro when it raises ``EncodeFallback``) and one
that only has fastavro (the path the encoder replaced). Both must give the same
bytes, or raise the same error (``SerializationError`` with the same message).
The native encoder alone must write fastavro's bytes or raise ``EncodeFallback``,
nothing else. Inputs: valid records of every shipped version of every record
type, the same records mutated at random paths (wrong types, removed and extra
keys, huge ints, non-str keys, surrogates, near-symbols, subclasses,
datetimes, tuples), and random values of schemas with every Avro type and with
unions more than one branch could take.
"""

from __future__ import annotations

import collections
import copy
import enum
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.serialization.test_native_decoder import EVERY_TYPE, canonical, turn_events
from turnaudit.errors import SerializationError
from turnaudit.serialization import native
from turnaudit.serialization.samples import sample_records
from turnaudit.serialization.schemas import (
    WriterSchema,
    decoding_schema,
    schema_from_json,
    shipped_catalog,
    shipped_record_names,
)
from turnaudit.serialization.serializers import FramedSerializer, SingleObjectSerializer

Pair = tuple[FramedSerializer, FramedSerializer]


def pair(schema: WriterSchema) -> Pair:
    project, reference = SingleObjectSerializer(schema), SingleObjectSerializer(schema)
    reference._native = None  # fastavro only: the reference
    return project, reference


def outcome(serialize: FramedSerializer, record: Any) -> tuple[Any, ...]:
    try:
        return ("bytes", serialize(record))
    except SerializationError as exc:
        return ("refused", str(exc))
    except Exception as exc:  # an error fastavro raises untyped must match too
        return ("raised", type(exc).__name__, str(exc))


def assert_same(serializers: Pair, record: Any) -> bool:
    """Whether the native encoder wrote the record (else it fell back)."""
    project, reference = serializers
    expected = outcome(reference, record)
    try:
        written = project._native(record, project._header)
    except native.EncodeFallback:
        written = None
    if written is not None:
        assert ("bytes", written) == expected, record
    assert outcome(project, record) == expected, record
    return written is not None


NAMES = shipped_record_names()
SCHEMAS = [s for name in NAMES for s in shipped_catalog(name).versions]
PAIRS = {(s.name, s.version): pair(s) for s in SCHEMAS}


def valid_records(schema: WriterSchema, n: int) -> list[dict[str, Any]]:
    if schema.name == "turn_event":
        return turn_events(schema.version, n)
    return sample_records(schema.schema_json, n)


RECORDS = {(s.name, s.version): valid_records(s, 40) for s in SCHEMAS}


class TestShippedSchemas:
    def test_every_shipped_schema_compiles(self) -> None:
        for project, reference in PAIRS.values():
            assert project.stats().native_schema
            assert not reference.stats().native_schema

    @pytest.mark.parametrize("key", sorted(PAIRS))
    def test_valid_records_are_fastavros_bytes(self, key: tuple[str, int]) -> None:
        serializers = PAIRS[key]
        before = serializers[0].stats().fastavro_records
        wrote = [assert_same(serializers, r) for r in RECORDS[key]]
        if key[0] == "turn_event":  # the publisher's records: never left to fastavro
            assert all(wrote)
            assert serializers[0].stats().fastavro_records == before

    @pytest.mark.parametrize("key", sorted(PAIRS))
    def test_what_the_encoder_writes_both_decoders_read_back(self, key: tuple[str, int]) -> None:
        project, _ = PAIRS[key]
        decoding = decoding_schema(project.schema.schema_json)
        decoder = native.compile_decoder(decoding)
        for record in RECORDS[key]:
            payload = project._native(record, project._header)
            natively = decoder(payload, len(project._header))
            by_fastavro = fastavro.schemaless_reader(
                io.BytesIO(payload[len(project._header) :]), decoding.parsed, None
            )
            assert canonical(natively) == canonical(by_fastavro)
            if key[0] == "turn_event":
                assert natively == {k: record[k] for k in natively}


class Text(str):
    pass


class Whole(int):
    pass


class Path(enum.Enum):
    MAIN = "MAIN"


SURROGATES = st.builds(
    lambda a, s, b: a + s + b,
    st.text(max_size=3),
    st.sampled_from(["\ud800", "\udfff", "\udc80"]),
    st.text(max_size=3),
)
SMALL = st.one_of(st.integers(), st.text(max_size=3), st.none())
WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(
        [
            2**31 - 1,
            2**31,
            -(2**31),
            -(2**31) - 1,
            2**63 - 1,
            2**63,
            -(2**63),
            -(2**63) - 1,
            2**64,
            10**30,
        ]
    ),
    st.floats(),
    st.floats(width=32),
    st.text(max_size=8),
    SURROGATES,
    st.binary(max_size=8),
    st.lists(SMALL, max_size=3),
    st.dictionaries(st.text(max_size=4), SMALL, max_size=3),
    st.datetimes(),
    st.datetimes(timezones=st.just(UTC)),
    st.tuples(st.text(max_size=4), SMALL),
    st.sampled_from(["MAIN", "STUB", "main", "MAIN ", "", "a", "b", "R", "G"]),
    st.builds(Text, st.sampled_from(["MAIN", "x"])),
    st.builds(Whole, st.integers(-3, 3)),
    st.binary(max_size=4).map(bytearray),
    st.just(Path.MAIN),
)
KEYS = st.one_of(
    st.text(max_size=6),
    st.integers(),
    st.none(),
    st.binary(max_size=3),
    st.tuples(st.integers()),
    SURROGATES,
)
# Values of the same kind as the one they replace: most keep the record one the
# native encoder writes, with other bytes (unicode, edge ints, NaN, empty lists).
SIMILAR: tuple[tuple[type, st.SearchStrategy[Any]], ...] = (
    (bool, st.booleans()),
    (int, st.integers(-(2**64), 2**64) | st.sampled_from([0, -1, 2**31])),
    (float, st.floats()),
    (str, st.text(max_size=12) | SURROGATES),
    (bytes, st.binary(max_size=8)),
)
OPS = ("replace", "replace", "similar", "similar", "delete", "extra", "append", "convert")


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if type(value) is dict:
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif type(value) is list:
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


# The same content in another container or a subclass (bool before int: a bool is an int).
CONVERSIONS: tuple[tuple[type, Any], ...] = (
    (dict, collections.OrderedDict),
    (list, tuple),
    (str, Text),
    (bool, int),
    (int, float),
    (bytes, bytearray),
)


def converted(value: Any) -> Any:
    for kind, convert in CONVERSIONS:
        if isinstance(value, kind):
            return convert(value)
    return value


def mutate(data: st.DataObject, record: Any) -> Any:
    """``record`` with 1 to 3 random edits at random paths (a deep copy)."""
    root = [copy.deepcopy(record)]
    for _ in range(data.draw(st.integers(1, 3))):
        path = (0, *data.draw(st.sampled_from(paths(root[0]))))
        parent: Any = root
        for step in path[:-1]:
            parent = parent[step]
        key, target = path[-1], parent[path[-1]]
        op = data.draw(st.sampled_from(OPS))
        if op == "replace":
            parent[key] = data.draw(WRONG)
        elif op == "similar":
            similar = [values for kind, values in SIMILAR if type(target) is kind]
            if similar:
                parent[key] = data.draw(similar[0])
            elif type(target) in (list, dict):  # a repeated item; fields in another order
                parent[key] = (
                    target[:1] * 2 if type(target) is list else dict(reversed(target.items()))
                )
            else:
                parent[key] = data.draw(WRONG)
        elif op == "delete" and parent is not root:
            del parent[key]
        elif op == "extra" and type(target) is dict:
            target[data.draw(KEYS)] = data.draw(WRONG)
        elif op == "append" and type(target) is list:
            target.append(data.draw(WRONG))
        else:
            parent[key] = converted(target)
    return root[0]


PROPERTY = settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class TestMutatedRecords:
    @PROPERTY
    @given(data=st.data())
    def test_mutated_records_give_fastavros_bytes_or_its_error(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(PAIRS)))
        record = mutate(data, data.draw(st.sampled_from(RECORDS[key])))
        assert_same(PAIRS[key], record)

    def test_a_record_left_to_fastavro_is_counted_and_written_the_same(self) -> None:
        project, reference = PAIRS[("turn_event", 4)]
        record = RECORDS[("turn_event", 4)][0]
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        dated = {**record, "occurred_at": epoch + timedelta(milliseconds=record["occurred_at"])}
        before = project.stats().fastavro_records
        assert project(dated) == project(record) == reference(record)
        assert project.stats().fastavro_records == before + 1

    def test_the_error_of_a_record_that_does_not_fit_is_unchanged(self) -> None:
        project, reference = PAIRS[("turn_event", 4)]
        record = {k: v for k, v in RECORDS[("turn_event", 4)][0].items() if k != "session_id"}
        with pytest.raises(SerializationError, match=r"^record does not fit turn_event v4: "):
            project(record)
        assert outcome(project, record) == outcome(reference, record)


# Unions a value of one Python type could take more than one branch of, and
# the other types fastavro's own rules decide (timestamp-millis, float32).
UNIONS: dict[str, Any] = {
    "type": "record",
    "name": "Unions",
    "namespace": "t.unions",
    "fields": [
        {"name": "num", "type": ["null", "long", "double"]},
        {"name": "real", "type": ["float", "double", "null"]},
        {"name": "i32", "type": ["null", "int"]},
        {
            "name": "word",
            "type": ["null", "string", {"type": "enum", "name": "Kind", "symbols": ["a", "b"]}],
        },
        {"name": "raw", "type": ["null", "bytes", {"type": "array", "items": "int"}]},
        {
            "name": "two",
            "type": [
                "null",
                {"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"}]},
                {
                    "type": "record",
                    "name": "B",
                    "fields": [
                        {"name": "x", "type": "long"},
                        {"name": "y", "type": ["null", "string"], "default": None},
                    ],
                },
            ],
        },
        {"name": "rec_or_map", "type": ["null", {"type": "map", "values": "long"}, "A"]},
        {"name": "plain", "type": ["null", "A"]},
        {"name": "flag", "type": ["boolean", "null"]},
        {"name": "when", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tiny", "type": "float"},
        {"name": "fx", "type": ["null", {"type": "fixed", "name": "Two", "size": 2}]},
    ],
}
AMBIGUOUS = {
    "num": st.integers(-5, 5),
    "real": st.floats(),
    "word": st.sampled_from(["a", "x"]),
    "raw": st.binary(max_size=3),
    "two": st.fixed_dictionaries({"x": st.integers(0, 9)}),
    "rec_or_map": st.fixed_dictionaries({"x": st.integers(0, 9)}),
}
PRIMITIVES = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32) | st.floats(),
    "double": st.floats(),
    "bytes": st.binary(max_size=6),
    "string": st.text(max_size=6),
}


def values(schema: Any, named: dict[str, Any], ns: str = "") -> st.SearchStrategy[Any]:
    """Valid values of ``schema`` (named types registered as they are met)."""
    if isinstance(schema, str):
        return PRIMITIVES[schema] if schema in PRIMITIVES else named[schema]
    if isinstance(schema, list):
        return st.one_of([values(b, named, ns) for b in schema])
    kind = schema["type"]
    ns = schema.get("namespace", ns)
    out: st.SearchStrategy[Any]
    if schema.get("logicalType") == "timestamp-millis":
        out = st.integers(-(2**40), 2**42) | st.datetimes(timezones=st.just(UTC))
    elif kind in PRIMITIVES:
        out = PRIMITIVES[kind]
    elif kind == "array":
        out = st.lists(values(schema["items"], named, ns), max_size=3)
    elif kind == "map":
        out = st.dictionaries(st.text(max_size=4), values(schema["values"], named, ns), max_size=3)
    elif kind == "enum":
        out = st.sampled_from(schema["symbols"])
    elif kind == "fixed":
        out = st.binary(min_size=schema["size"], max_size=schema["size"])
    else:
        out = st.fixed_dictionaries(
            {f["name"]: values(f["type"], named, ns) for f in schema["fields"]}
        )
    if "name" in schema:
        named[schema["name"]] = named[f"{ns}.{schema['name']}" if ns else schema["name"]] = out
    return out


RANDOM_SCHEMAS = {raw["name"]: raw for raw in (EVERY_TYPE, UNIONS)}
RANDOM_PAIRS = {
    n: pair(schema_from_json(json.dumps(raw), name=n, version=1))
    for n, raw in RANDOM_SCHEMAS.items()
}
RANDOM_VALUES = {n: values(raw, {}) for n, raw in RANDOM_SCHEMAS.items()}


class TestEveryAvroType:
    def test_the_random_schemas_compile(self) -> None:
        assert all(p[0].stats().native_schema for p in RANDOM_PAIRS.values())

    @PROPERTY
    @given(data=st.data())
    def test_random_values_give_fastavros_bytes_and_read_back(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(RANDOM_SCHEMAS)))
        record = data.draw(RANDOM_VALUES[name])
        project = RANDOM_PAIRS[name][0]
        if not assert_same(RANDOM_PAIRS[name], record):
            return
        decoding = decoding_schema(project.schema.schema_json)
        payload = project(record)
        body = payload[len(project._header) :]
        natively = native.compile_decoder(decoding)(body, 0)
        by_fastavro = fastavro.schemaless_reader(io.BytesIO(body), decoding.parsed, None)
        assert canonical(natively) == canonical(by_fastavro)

    @PROPERTY
    @given(data=st.data())
    def test_mutated_random_values_give_fastavros_bytes_or_its_error(
        self, data: st.DataObject
    ) -> None:
        name = data.draw(st.sampled_from(sorted(RANDOM_SCHEMAS)))
        assert_same(RANDOM_PAIRS[name], mutate(data, data.draw(RANDOM_VALUES[name])))

    @staticmethod
    def unambiguous(data: st.DataObject) -> dict[str, Any]:
        """A Unions record the native encoder writes (its ambiguous fields None)."""
        record: dict[str, Any] = {**data.draw(RANDOM_VALUES["Unions"]), **dict.fromkeys(AMBIGUOUS)}
        assume(assert_same(RANDOM_PAIRS["Unions"], record))
        return record

    @settings(max_examples=400, deadline=None)
    @given(data=st.data())
    def test_a_value_more_than_one_branch_could_take_goes_to_fastavro(
        self, data: st.DataObject
    ) -> None:
        record = self.unambiguous(data)
        field = data.draw(st.sampled_from(sorted(AMBIGUOUS)))
        record[field] = data.draw(AMBIGUOUS[field])
        assert not assert_same(RANDOM_PAIRS["Unions"], record)

    @settings(max_examples=200, deadline=None)
    @given(data=st.data())
    def test_a_record_with_a_type_key_goes_to_fastavro(self, data: st.DataObject) -> None:
        record = self.unambiguous(data)
        record["plain"] = {"x": 1, "-type": data.draw(st.sampled_from(["t.unions.A", "A", "B"]))}
        assert not assert_same(RANDOM_PAIRS["Unions"], record)


class TestUnsupportedSchemas:
    def test_a_schema_the_compiler_refuses_is_written_by_fastavro(self) -> None:
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
            native.compile_encoder(schema.schema_json)
        serialize = SingleObjectSerializer(schema)
        assert not serialize.stats().native_schema
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema.parsed, {"day": 19_000, "note": "x"})
        assert serialize({"day": 19_000, "note": "x"})[10:] == buf.getvalue()
        assert serialize.stats().fastavro_records == 1
