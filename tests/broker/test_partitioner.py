"""Where a real librdkafka producer puts keyed messages, against the placements
``turnaudit.kafka.partitioner`` computes (what ``verify --follow`` relies on for a stream
none of whose turns arrived): every keyed partitioner librdkafka ships, on a topic of 7
partitions, for session-id-like and arbitrary keys."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from turnaudit.kafka.partitioner import key_partitioner

pytestmark = pytest.mark.broker

PARTITIONS = 7
KEYS = [str(uuid.UUID(int=n * 7919 + 13)).encode() for n in range(150)] + [
    f"sess-{n}-\u00e9\u4e2d".encode() for n in range(40)
]


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    name = f"partitioner-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)
    return name


@pytest.mark.parametrize(
    "partitioner",
    [None, "consistent_random", "consistent", "murmur2_random", "murmur2", "fnv1a_random", "fnv1a"],
)
def test_librdkafka_places_each_keyed_message_where_it_is_computed(
    kafka_bootstrap: str, topic: str, partitioner: str | None
) -> None:
    config = {"bootstrap.servers": kafka_bootstrap, "log_level": 0}
    if partitioner is not None:
        config["partitioner"] = partitioner
    producer = Producer(config)
    placed: dict[bytes, int] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        placed[msg.key()] = msg.partition()  # type: ignore[attr-defined]  # a Message

    for key in KEYS:
        producer.produce(topic, b"x", key, on_delivery=delivered)
    assert producer.flush(30) == 0
    place = key_partitioner(partitioner)
    assert place is not None
    computed = {key: place(key, PARTITIONS) for key in KEYS}
    assert placed == computed
    assert len(set(placed.values())) == PARTITIONS  # every partition used: a real spread
