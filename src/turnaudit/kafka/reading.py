"""Reading a bounded offset range of a topic: for the demo, replays and tests.

Uses manual partition assignment (no consumer group, nothing committed), so
it never disturbs the services' groups.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import end_offsets
from turnaudit.settings import KafkaSettings

# end_offsets lives in turnaudit.kafka.offsets; named here for the modules that
# still import it from this one.
__all__ = ["end_offsets", "read_range"]

# librdkafka's own log lines (one per failed connection attempt) stay off
# stderr; failures reach the caller as exceptions.
_QUIET = {"log_level": 0}


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
