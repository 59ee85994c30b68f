"""The schemas-topic resolver: versions the reader does not ship decode from the topic."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from tests.support.events import turn
from turnaudit.errors import SchemaNotFoundError
from turnaudit.kafka.schema_topic import SchemaTopicResolver
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def v3_schema() -> str:
    """v2 plus a field with a default: what a newer runtime might write."""
    schema = json.loads(shipped_catalog().latest.schema_json)
    schema["fields"].append({"name": "locale", "type": "string", "default": "en"})
    return json.dumps(schema)


def announce(settings: KafkaSettings, key: str, schema_json: str) -> None:
    producer = Producer(settings.client_config())
    producer.produce(settings.topics.schemas, schema_json.encode(), key.encode())
    assert producer.flush(10) == 0


def test_an_unshipped_writer_schema_on_the_topic_decodes(kafka_settings: KafkaSettings) -> None:
    v3 = schema_from_json(v3_schema(), name="turn_event", version=3)
    announce(kafka_settings, v3.fingerprint_hex, v3.schema_json)
    event = turn("s-v3", 0) | {"locale": "fr"}
    payload = SingleObjectSerializer(v3)(event)
    decode = TurnEventDeserializer(shipped_catalog(), resolver=SchemaTopicResolver(kafka_settings))
    decoded = decode(payload)
    assert decoded.writer_fingerprint == v3.fingerprint_hex
    assert decoded.event["event_id"] == "s-v3-0"
    assert "locale" not in decoded.event  # read into the current reader's shape


def test_a_fingerprint_nobody_announced_stays_unknown(kafka_settings: KafkaSettings) -> None:
    decode = TurnEventDeserializer(shipped_catalog(), resolver=SchemaTopicResolver(kafka_settings))
    with pytest.raises(SchemaNotFoundError):
        decode(b"\xc3\x01" + bytes(8) + b"\x00")


def test_misses_reread_the_topic_at_most_once_per_interval(kafka_settings: KafkaSettings) -> None:
    now = [0.0]
    resolver = SchemaTopicResolver(kafka_settings, min_refresh_interval=5.0, clock=lambda: now[0])
    v3 = schema_from_json(v3_schema(), name="turn_event", version=3)
    assert resolver(v3.fingerprint) is None  # first miss: the topic is read, nothing there
    announce(kafka_settings, v3.fingerprint_hex, v3.schema_json)
    now[0] = 1.0
    assert resolver(v3.fingerprint) is None  # within the interval: no re-read
    now[0] = 6.0
    assert resolver(v3.fingerprint) == v3.schema_json


def test_a_record_whose_key_is_not_its_fingerprint_is_known_by_its_own(
    kafka_settings: KafkaSettings,
) -> None:
    v3 = schema_from_json(v3_schema(), name="turn_event", version=3)
    announce(kafka_settings, "00" * 8, v3.schema_json)
    resolver = SchemaTopicResolver(kafka_settings)
    assert resolver(bytes(8)) is None
    assert resolver(v3.fingerprint) == v3.schema_json
