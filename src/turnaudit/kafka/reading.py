"""Reading a bounded offset range of a topic: for the demo, verify and tests.

An assigned reader (``KafkaConsumer.assign``: no consumer group joined,
nothing committed), so it never disturbs the services' groups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from turnaudit.errors import BrokerError
from turnaudit.kafka.consumer import BEGINNING, READER, KafkaConsumer
from turnaudit.records import Record
from turnaudit.settings import KafkaSettings


def read_range(
    settings: KafkaSettings,
    topic: str,
    start: Mapping[int, int] | None,
    end: Mapping[int, int],
    *,
    timeout: float = 60.0,
) -> Iterator[Record]:
    """Every record from ``start`` (default: the beginning) up to ``end`` (exclusive)."""
    begin: Mapping[int, int] = start or {}
    todo = {p: e for p, e in end.items() if e > begin.get(p, 0)}
    if not todo:
        return
    consumer = KafkaConsumer(settings, topic, READER)
    try:
        consumer.assign({p: begin.get(p, BEGINNING) for p in todo})
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"timed out reading {topic}: partitions {sorted(todo)} unfinished"
                )
            for record in consumer.consume(1000, 0.5):
                partition, offset = record.partition(), record.offset()
                if partition is None or offset is None:
                    continue
                if partition not in todo or offset >= todo[partition]:
                    continue
                yield record
                if offset + 1 >= todo[partition]:
                    del todo[partition]
    finally:
        consumer.close()
