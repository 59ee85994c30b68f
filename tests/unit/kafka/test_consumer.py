"""The consumer wrapper on librdkafka's in-process mock cluster (no JVM): commits
with and without metadata read back as committed; client failures are BrokerError."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from turnaudit.errors import BrokerError
from turnaudit.kafka.consumer import READER, KafkaConsumer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames


@pytest.fixture
def mock_settings() -> Iterator[tuple[KafkaSettings, str]]:
    """A mock cluster with one topic of 4 partitions (it lives as long as its producer)."""
    producer = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    topic = f"t-{uuid.uuid4().hex[:8]}"
    for n in range(20):
        producer.produce(topic, b"v", str(n).encode(), partition=n % 4)
    assert producer.flush(10) == 0
    brokers = producer.list_topics(timeout=10).brokers.values()
    settings = KafkaSettings(
        bootstrap_servers=",".join(f"{b.host}:{b.port}" for b in brokers), topics=TopicNames("m.")
    )
    yield settings, topic
    producer.flush(1)  # the cluster lived until here, with its producer


def test_commits_with_and_without_metadata_read_back(
    mock_settings: tuple[KafkaSettings, str],
) -> None:
    settings, topic = mock_settings
    consumer = KafkaConsumer(settings, topic, READER, group_id="g-commit")
    try:
        consumer.commit({0: 3, 1: 5}, metadata={1: "bound:abc:0:5"})
        assert consumer.commit_unless_rebalancing({2: 4}, metadata={2: "x"})
        found = consumer.committed(range(4), timeout=10)
    finally:
        consumer.close()
    assert (found[0].offset, found[1].offset, found[2].offset) == (3, 5, 4)
    assert (found[1].metadata, found[2].metadata) == ("bound:abc:0:5", "x")
    assert found[3].offset < 0  # nothing committed


def test_a_client_failure_is_a_broker_error(mock_settings: tuple[KafkaSettings, str]) -> None:
    settings, topic = mock_settings
    consumer = KafkaConsumer(settings, topic, READER)
    try:
        with pytest.raises(BrokerError, match=f"cannot store offsets of {topic}"):
            consumer.store({0: 1})  # not assigned: librdkafka refuses
    finally:
        consumer.close()
