"""No message stops a service: the three crash classes, each on the real broker.

Each test puts the bad message between valid turns of one session (so on one
partition, behind and ahead of it) and asserts every valid turn is counted,
the bad one is accounted for in the dead-letter topic with a typed reason,
and the service never restarted (one run, still live).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.support.events import encode, turn
from tests.support.streams import (
    consumed_everything,
    running,
    service_settings,
    wait_for,
)
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.dead_letters import TRUNCATED_VALUE_BYTES, read_dead_letter_headers
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.records import record_headers
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

SESSION = "s-around"


def around(settings: KafkaSettings, bad: list[bytes], *, valid: int = 20) -> None:
    """Valid turns 0..valid-1 of one session with the bad messages in the middle."""
    events = [encode(turn(SESSION, n)) for n in range(valid)]
    half = valid // 2
    values = events[:half] + bad + events[half:]
    # Idempotent: a retried batch (a new topic's leader not known yet) keeps its place.
    producer = Producer(
        settings.client_config(**{"message.max.bytes": 2_000_000, "enable.idempotence": True})
    )
    for value in values:
        producer.produce(settings.topics.turn_events, value, SESSION.encode())
    assert producer.flush(30) == 0


@contextmanager
def metrics_service(settings: KafkaSettings, group: str) -> Iterator[verdict_metrics_service]:
    service = verdict_metrics_service(
        service_settings(settings, ServiceName.VERDICT_METRICS, group),
        registry=CollectorRegistry(),
    )
    with running(service):
        yield service


def consume_all(service: verdict_metrics_service, settings: KafkaSettings) -> None:
    end = end_offsets(settings, settings.topics.turn_events)
    assert wait_for(consumed_everything(service, end))
    assert service.health.liveness().ok  # the same run: it never stopped


def dead_letters(settings: KafkaSettings) -> list[tuple[dict[str, str], bytes, bytes]]:
    end = end_offsets(settings, settings.topics.dlq)
    return [
        (read_dead_letter_headers(record_headers(m)), m.value() or b"", m.key() or b"")
        for m in read_range(settings, settings.topics.dlq, None, end)
    ]


def limit_topic(settings: KafkaSettings, topic: str, max_bytes: int) -> None:
    """Set the topic's max.message.bytes (the broker refuses anything larger)."""
    admin = AdminClient(settings.client_config())
    entry = ConfigEntry(
        "max.message.bytes", str(max_bytes), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def counted(service: verdict_metrics_service) -> float:
    """Turns the metrics service counted, over every label."""
    return sum(
        s.value
        for family in service._registry.collect()
        for s in family.samples
        if s.name == "turnaudit_turns_total"
    )


def value(service: verdict_metrics_service, name: str, **labels: str) -> float:
    return service._registry.get_sample_value(name, labels) or 0.0


def test_crash_class_a_timestamp_beyond_datetime_is_dead_lettered_and_the_stream_goes_on(
    kafka_settings: KafkaSettings,
) -> None:
    # A producer that wrote microseconds into a timestamp-millis field: the
    # body is valid Avro, but fastavro cannot make a datetime of it.
    micros = turn(SESSION, 99)
    micros["occurred_at"] = 1_764_000_000_000_000
    bad = encode(micros)
    around(kafka_settings, [bad])
    with metrics_service(kafka_settings, "g-crash-a") as service:
        consume_all(service, kafka_settings)
        assert counted(service) == 20
        assert value(service, "turnaudit_dead_letters_total", reason="undecodable") == 1
    [(headers, letter, key)] = dead_letters(kafka_settings)
    assert (letter, key) == (bad, SESSION.encode())
    assert headers["reason"] == "undecodable"
    assert "OverflowError" in headers["error"]
    assert headers["offset"] == "10"


def unresolvable_schema() -> tuple[str, bytes]:
    """A TurnEvent schema whose session_id is an int: parses, cannot resolve into the reader."""
    schema = json.loads(shipped_catalog().latest.schema_json)
    for field in schema["fields"]:
        if field["name"] == "session_id":
            field["type"] = "int"
    writer = schema_from_json(json.dumps(schema), name="turn_event", version=-1)
    record = turn(SESSION, 99) | {"session_id": 7}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, writer.parsed, record)
    return writer.schema_json, b"\xc3\x01" + writer.fingerprint + body.getvalue()


def test_crash_class_b_unusable_schemas_topic_records_are_skipped_never_fatal(
    kafka_settings: KafkaSettings,
) -> None:
    schema_json, bad = unresolvable_schema()
    fingerprint = schema_from_json(schema_json, name="turn_event", version=-1).fingerprint_hex
    not_a_record = schema_from_json('"int"', name="turn_event", version=-1)
    producer = Producer(kafka_settings.client_config())
    for key, record in [
        (fingerprint.encode(), schema_json.encode()),  # resolves badly: caught on use
        (b"0011223344556677", b"{not json"),
        (not_a_record.fingerprint_hex.encode(), b'"int"'),
        (b"ff" * 8, b"\xff\xfe\x00"),  # not UTF-8
        (b"0123456789abcdef", b""),  # an empty value that is no tombstone
    ]:
        # (A compacted topic refuses keyless records itself.)
        producer.produce(kafka_settings.topics.schemas, record, key)
    assert producer.flush(10) == 0
    int_framed = b"\xc3\x01" + not_a_record.fingerprint + b"\x02"
    around(kafka_settings, [bad, bad, int_framed])
    with metrics_service(kafka_settings, "g-crash-b") as service:
        consume_all(service, kafka_settings)
        assert counted(service) == 20
        assert value(service, "turnaudit_dead_letters_total", reason="unusable_schema") == 2
        assert value(service, "turnaudit_dead_letters_total", reason="unknown_schema") == 1
        unusable = {
            reason: value(service, "turnaudit_schema_topic_unusable_records_total", reason=reason)
            for reason in ("not_a_schema", "not_a_record", "no_key_or_value")
        }
    assert unusable == {"not_a_schema": 2, "not_a_record": 1, "no_key_or_value": 1}
    letters = dead_letters(kafka_settings)
    assert sorted(h["reason"] for h, _, _ in letters) == [
        "unknown_schema",
        "unusable_schema",
        "unusable_schema",
    ]
    for headers, letter, _ in letters:
        if headers["reason"] == "unusable_schema":
            assert letter == bad
            assert "does not resolve against the reader" in headers["error"]


def test_crash_class_c_a_message_near_the_size_limit_is_dead_lettered_truncated(
    kafka_settings: KafkaSettings,
) -> None:
    # Two ways a full copy does not fit: larger than the producer's
    # message.max.bytes (refused before sending), and larger than the
    # dead-letter topic's max.message.bytes (refused by the broker).
    limit_topic(kafka_settings, kafka_settings.topics.dlq, 600_000)
    fingerprint = shipped_catalog().latest.fingerprint
    near_topic_limit = b"\xc3\x01" + fingerprint + b"\x01" * 1_040_000  # topic accepts ~1 MiB
    over_dlq_limit = b"\xc3\x01" + fingerprint + b"\x02" * 700_000
    around(kafka_settings, [near_topic_limit, over_dlq_limit])
    with metrics_service(kafka_settings, "g-crash-c") as service:
        consume_all(service, kafka_settings)
        assert counted(service) == 20
        assert value(service, "turnaudit_dead_letters_total", reason="undecodable") == 2
        assert value(service, "turnaudit_dead_letters_truncated_total") == 2
        assert value(service, "turnaudit_dead_letter_failures_total") == 0
    letters = sorted(dead_letters(kafka_settings), key=lambda x: int(x[0]["offset"]))
    assert [h["offset"] for h, _, _ in letters] == ["10", "11"]
    for (headers, letter, key), original in zip(
        letters, [near_topic_limit, over_dlq_limit], strict=True
    ):
        assert headers["truncated"] == "true"
        assert headers["original_size"] == str(len(original))
        assert headers["reason"] == "undecodable"
        assert headers["topic"] == kafka_settings.topics.turn_events
        assert letter == original[:TRUNCATED_VALUE_BYTES]
        assert key == SESSION.encode()
        assert "too large" in headers["write_error"].lower()


def test_a_dead_letter_refused_even_truncated_is_counted_and_logged_and_the_stream_goes_on(
    kafka_settings: KafkaSettings,
) -> None:
    # A dead-letter topic that takes nothing over 1 kB: neither the copy nor
    # its truncated form fits. The original stays at its offset, named in a
    # critical log line; the failure is counted (and the dead letter too, so
    # the dead-letter alert fires); the offsets move on.
    limit_topic(kafka_settings, kafka_settings.topics.dlq, 1000)
    bad = b"\xff" + b"\x00" * 5000
    around(kafka_settings, [bad])
    with capture_logs() as logs, metrics_service(kafka_settings, "g-dlq-refused") as service:
        consume_all(service, kafka_settings)
        assert counted(service) == 20
        assert value(service, "turnaudit_dead_letters_total", reason="unknown_framing") == 1
        assert value(service, "turnaudit_dead_letter_failures_total") == 1
        assert value(service, "turnaudit_dead_letters_truncated_total") == 0
    assert dead_letters(kafka_settings) == []
    (failure,) = [e for e in logs if e["event"] == "dead_letter_write_failed"]
    assert failure["log_level"] == "critical"
    assert failure["dlq"]["offset"] == "10"
    assert failure["dlq"]["topic"] == kafka_settings.topics.turn_events
    assert failure["dlq"]["truncated"] == "true"
