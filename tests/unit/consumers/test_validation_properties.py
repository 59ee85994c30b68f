"""Property: no bytes, framing, size or schemas-topic record makes validation raise.

Everything goes through the path a service uses: the schemas-topic resolver
learns the records (``SchemaTopicResolver.learn``, what a topic read calls),
the deserializer decodes with it, and ``TurnEventValidation.examine`` (decode,
contracts, stream tracking) gives a turn or a typed rejection.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.events import breaking_events, encode, turn
from turnaudit.consumers.runtime import ConsumedTurn, Rejection, TurnEventValidation
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.dead_letters import DeadLetterReason
from turnaudit.kafka.schema_topic import SchemaTopicResolver
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.serialization.wire import (
    CONFLUENT_HEADER_LEN,
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MAGIC,
    TurnEventDeserializer,
)
from turnaudit.settings import KafkaSettings

CATALOG = shipped_catalog()
VALID = [encode(turn("s-prop", n, version=v)) for v in (1, 2) for n in range(2)]
FINGERPRINTS = [s.fingerprint for s in CATALOG.versions]
READER = json.loads(CATALOG.latest.schema_json)
AVRO_TYPES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]


class Pipeline:
    """A fresh resolver, decoder and validation: what one service holds."""

    def __init__(self) -> None:
        self.resolver = SchemaTopicResolver(
            KafkaSettings(bootstrap_servers="127.0.0.1:1"), registry=CollectorRegistry()
        )
        self.validation = TurnEventValidation(
            TurnEventDeserializer(CATALOG, resolver=self.resolver.known),
            ConsumerMetrics(CollectorRegistry()),
            max_sessions=1000,
        )
        self.offset = 0

    def examine(self, value: bytes | None, key: bytes | None = None) -> ConsumedTurn | Rejection:
        self.offset += 1
        result = self.validation.examine(value, key, "t", self.offset % 3, self.offset)
        assert isinstance(result, ConsumedTurn | Rejection)
        rejection = result if isinstance(result, Rejection) else None
        if rejection is not None:
            assert rejection.reason in DeadLetterReason
            assert rejection.error
        else:
            assert isinstance(result, ConsumedTurn)
            assert isinstance(result.event["session_id"], str)
        return result


def mutated(value: bytes, position: int, byte: int) -> bytes:
    return value[:position] + bytes([byte]) + value[position + 1 :]


# -- exhaustive over every byte position, truncation and header boundary -------------
def test_every_byte_position_of_a_valid_event_flipped_never_raises() -> None:
    pipeline = Pipeline()
    for value in VALID:
        for position in range(len(value)):
            for byte in (value[position] ^ 0xFF, value[position] ^ 0x01, 0x00, 0x80, 0x7F):
                pipeline.examine(mutated(value, position, byte))


def test_every_truncation_and_extension_of_a_valid_event_never_raises() -> None:
    pipeline = Pipeline()
    for value in VALID:
        for end in range(len(value)):
            result = pipeline.examine(value[:end])
            assert isinstance(result, Rejection)  # nothing shorter is a whole event
        for tail in (b"\x00", b"\xff" * 9, value):
            result = pipeline.examine(value + tail)
            assert isinstance(result, Rejection)
            assert result.reason is DeadLetterReason.UNDECODABLE


def test_boundary_sizes_never_raise() -> None:
    pipeline = Pipeline()
    heads = [SINGLE_OBJECT_MAGIC + fp for fp in FINGERPRINTS] + [b"\x00\x00\x00\x00\x01"]
    for head in heads:
        for size in {
            0,
            1,
            2,
            CONFLUENT_HEADER_LEN,
            SINGLE_OBJECT_HEADER_LEN - 1,
            SINGLE_OBJECT_HEADER_LEN,
            SINGLE_OBJECT_HEADER_LEN + 1,
        }:
            assert isinstance(pipeline.examine(head[:size]), Rejection)
        for fill in (b"\x00", b"\x01", b"\x7f", b"\xff"):
            for size in (1 << 10, 1 << 16, 1 << 20):  # up to the topic's ~1 MiB
                assert isinstance(pipeline.examine(head + fill * size), Rejection)
    assert isinstance(pipeline.examine(None), Rejection)


def test_the_breaching_events_are_turns_with_their_breaches() -> None:
    pipeline = Pipeline()
    for reason, event in breaking_events().items():
        result = pipeline.examine(encode(event), event["session_id"].encode())
        assert isinstance(result, ConsumedTurn)
        assert result.breaches
        assert "contract:" + result.breaches[0].partition(":")[0] == reason


# -- random --------------------------------------------------------------------------
framed = st.one_of(
    st.binary(max_size=600),
    st.builds(
        lambda fp, body: SINGLE_OBJECT_MAGIC + fp + body,
        st.sampled_from(FINGERPRINTS),
        st.binary(max_size=600),
    ),
    st.builds(
        lambda sid, body: b"\x00" + sid.to_bytes(4, "big") + body,
        st.integers(0, 2**32 - 1),
        st.binary(max_size=100),
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(framed)
def test_random_bytes_in_any_framing_never_raise(value: bytes) -> None:
    result = Pipeline().examine(value)
    assert isinstance(result, Rejection | ConsumedTurn)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, 400),
    st.binary(max_size=50),
)
def test_mutated_valid_events_never_raise(
    value: bytes, flips: list[tuple[int, int]], cut: int, extension: bytes
) -> None:
    for position, byte in flips:
        value = mutated(value, position % len(value), byte)
    pipeline = Pipeline()
    pipeline.examine(value)
    pipeline.examine(value[: cut % (len(value) + 1)])
    pipeline.examine(value + extension)


def _mutated_field_type(schema: dict[str, Any], index: int, new_type: Any) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    fields = schema["fields"]
    fields[index % len(fields)]["type"] = new_type
    fields[index % len(fields)].pop("default", None)
    return schema


schema_types: st.SearchStrategy[Any] = st.recursive(
    st.sampled_from(AVRO_TYPES)
    | st.builds(
        lambda lt: {"type": "long", "logicalType": lt},
        st.sampled_from(["timestamp-millis", "timestamp-micros"]),
    ),
    lambda inner: (
        st.builds(lambda i: {"type": "array", "items": i}, inner)
        | st.builds(lambda i: {"type": "map", "values": i}, inner)
        | st.lists(inner, min_size=1, max_size=3, unique_by=json.dumps)
    ),
    max_leaves=4,
)
schema_records = st.one_of(
    # a TurnEvent schema with one field's type changed (parses; resolves or not)
    st.builds(
        lambda i, t: json.dumps(_mutated_field_type(READER, i, t)),
        st.integers(0, 100),
        schema_types,
    ),
    # a schema that is not a record, and text that is no schema at all
    st.builds(json.dumps, schema_types),
    st.text(max_size=80),
    st.builds(lambda b: b.decode("latin-1"), st.binary(max_size=80)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.binary(max_size=20), schema_records), min_size=1, max_size=4),
    st.binary(max_size=300),
)
def test_random_schemas_topic_records_never_make_decoding_raise(
    records: list[tuple[bytes, str]], body: bytes
) -> None:
    pipeline = Pipeline()
    fingerprints = []
    for key, text in records:
        pipeline.resolver.learn(key or None, text.encode())
        try:
            fingerprints.append(schema_from_json(text, name="turn_event", version=-1).fingerprint)
        except Exception:  # noqa: S112 - not a schema: nothing frames with it
            continue
    for fp in fingerprints:
        # each framed message twice: the second meets the cached (maybe unusable) plan
        for _ in range(2):
            pipeline.examine(SINGLE_OBJECT_MAGIC + fp + body)
        for value in VALID:
            pipeline.examine(SINGLE_OBJECT_MAGIC + fp + value[SINGLE_OBJECT_HEADER_LEN:])


@pytest.mark.parametrize("max_event_ids", [1, 2, 5])
def test_the_dedupe_bound_forgets_the_oldest_ids_and_counts_them(max_event_ids: int) -> None:
    registry = CollectorRegistry()
    validation = TurnEventValidation(
        TurnEventDeserializer(CATALOG),
        ConsumerMetrics(registry),
        max_sessions=1000,
        max_event_ids=max_event_ids,
    )
    sessions = [f"s-{n}" for n in range(8)]
    values = [encode(turn(session, 0)) for session in sessions]
    for offset, (session, value) in enumerate(zip(sessions, values, strict=True)):
        found = validation.examine(value, session.encode(), "t", 0, offset)
        assert isinstance(found, ConsumedTurn)
        assert found.sequence.counts_as_turn
    forgotten = registry.get_sample_value("turnaudit_stream_forgotten_event_ids_total")
    assert forgotten == len(sessions) - max_event_ids
    # The newest remembered id is still told apart: the same message again is a redelivery.
    again = validation.examine(values[-1], sessions[-1].encode(), "t", 0, 7)
    assert isinstance(again, ConsumedTurn)
    assert again.sequence.redelivered
