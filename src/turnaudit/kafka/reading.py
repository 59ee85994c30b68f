"""Reading a bounded offset range of a topic: for the demo, replays and tests.

Uses manual partition assignment (no consumer group, nothing committed), so
it never disturbs the services' groups.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from turnaudit.errors import BrokerError
from turnaudit.settings import KafkaSettings

# librdkafka's own log lines (one per failed connection attempt) stay off
# stderr; failures reach the caller as exceptions.
_QUIET = {"log_level": 0}
_LEADERSHIP_ERRORS = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
})


def end_offsets(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """The high watermark of every partition of ``topic``."""
    consumer = Consumer(
        settings.client_config(_QUIET, **{"group.id": f"turnaudit-probe-{uuid.uuid4().hex}"})
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise BrokerError(f"topic {topic} does not exist")
        deadline = time.monotonic() + timeout
        while True:
            try:
                return {
                    p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
                    for p in metadata.topics[topic].partitions
                }
            except KafkaException as exc:
                # Right after topic creation a leader may not be known yet;
                # librdkafka does not flag every such error as retriable.
                error = exc.args[0]
                transient = error.retriable() or error.code() in _LEADERSHIP_ERRORS
                if not transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    except KafkaException as exc:
        raise BrokerError(f"cannot read offsets of {topic}: {exc}") from exc
    finally:
        consumer.close()


def read_range(
    settings: KafkaSettings,
    topic: str,
    start: Mapping[int, int] | None,
    end: Mapping[int, int],
    *,
    timeout: float = 60.0,
) -> Iterator[Message]:
    """Every message from ``start`` (default: the beginning) up to ``end`` (exclusive)."""
    begin: Mapping[int, int] = start or {}
    todo = {p: e for p, e in end.items() if e > begin.get(p, 0)}
    if not todo:
        return
    consumer = Consumer(
        settings.client_config(
            _QUIET,
            **{
                "group.id": f"turnaudit-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, begin.get(p, OFFSET_BEGINNING)) for p in todo])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"timed out reading {topic}: partitions {sorted(todo)} unfinished"
                )
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    raise BrokerError(f"reading {topic}: {msg.error()}")
                partition, offset = msg.partition(), msg.offset()
                if partition is None or offset is None:
                    continue
                if partition not in todo or offset >= todo[partition]:
                    continue
                yield msg
                if offset + 1 >= todo[partition]:
                    del todo[partition]
    finally:
        consumer.close()
