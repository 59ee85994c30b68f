"""The consume loop on librdkafka's in-process mock cluster: the edit-loop tier.

librdkafka ships a mock cluster (``test.mock.num.brokers``) that speaks the
Kafka protocol on a loopback port inside this process: consumer groups,
offset commits and produce work, with no JVM. It is no stand-in for the real
broker (``tests/broker/consumers/test_runtime.py`` holds these promises
against it); it lets a change to the loop, the ledger or the hand-over be
tried in seconds: every valid turn reaches the sink once through sink
failures, every undecodable record is dead-lettered with its reason, and the
committed offsets are exactly the end of what the sink took.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from tests.support.events import encode, turn
from tests.support.streams import running, service_settings, wait_for
from turnaudit.consumers.runtime import BatchingSink, ConsumedTurn, ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.dead_letters import read_dead_letter_headers
from turnaudit.kafka.consumer import READER, KafkaConsumer
from turnaudit.records import record_headers
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

PARTITIONS = 4  # the mock cluster's default for a topic created by a produce


class FailingTwice(BatchingSink):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 2
        self.ids: list[str] = []

    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        self.ids += [t.event["event_id"] for t in turns]


@pytest.fixture
def mock_cluster() -> Iterator[tuple[KafkaSettings, Producer]]:
    """A mock cluster (it lives as long as the producer that made it), its settings."""
    producer = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    brokers = producer.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
    yield (
        KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(f"m-{uuid.uuid4().hex[:8]}.")),
        producer,
    )
    producer.flush(5)


def test_every_turn_once_through_sink_failures_and_bad_bytes_dead_lettered(
    mock_cluster: tuple[KafkaSettings, Producer],
) -> None:
    settings, producer = mock_cluster
    events = [turn(f"s-mock-{n % 5}", n // 5) for n in range(200)]
    garbage = [b"", b"\x00\x01not avro", b"\xc3\x01" + b"\x00" * 8]
    for n, event in enumerate(events):
        producer.produce(settings.topics.turn_events, encode(event), event["session_id"].encode())
        if n % 70 == 0:
            producer.produce(settings.topics.turn_events, garbage[n // 70], b"s-mock-0")
    assert producer.flush(10) == 0
    sink = FailingTwice()
    registry = CollectorRegistry()
    service = ConsumerService(
        service_settings(settings, ServiceName.LOG_SINK, "g-mock"),
        sink,
        registry=registry,
        serve_http=False,
    )
    with running(service):
        assert wait_for(lambda: len(sink.ids) >= len(events), timeout=60)
        assert wait_for(lambda: sum(service.positions().values()) == len(events) + 3, timeout=30)
    assert sorted(sink.ids) == sorted(e["event_id"] for e in events)
    assert registry.get_sample_value("turnaudit_sink_failures_total") == 2
    # What was committed is exactly where each partition ends.
    reader = KafkaConsumer(settings, settings.topics.turn_events, READER, group_id="g-mock")
    committed = reader.committed(range(PARTITIONS), timeout=10)
    reader.close()
    assert sum(c.offset for c in committed.values() if c.offset > 0) == len(events) + 3
    # Each undecodable record is a dead letter naming its origin and reason.
    dlq = KafkaConsumer(settings, settings.topics.dlq, READER)
    dlq.assign({p: 0 for p in range(PARTITIONS)})
    letters: list[dict[str, str]] = []
    assert wait_for(
        lambda: (
            bool(
                letters.extend(
                    read_dead_letter_headers(record_headers(r)) for r in dlq.consume(100, 0.2)
                )
            )
            or len(letters) >= 3
        ),
        timeout=30,
    )
    dlq.close()
    assert len(letters) == 3
    assert {letter["topic"] for letter in letters} == {settings.topics.turn_events}
    assert all(letter["reason"] and letter["stage"].startswith("log-sink/") for letter in letters)
