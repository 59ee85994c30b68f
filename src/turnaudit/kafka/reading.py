"""Reading a bounded offset range of a topic: for the demo, verify and tests.

An assigned reader (``KafkaConsumer.assign``: no consumer group joined,
nothing committed), so it never disturbs the services' groups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from turnaudit.errors import BrokerError
from turnaudit.kafka.consumer import BEGINNING, BULK_READER, READER, KafkaConsumer
from turnaudit.kafka.offsets import watermarks
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
    for batch in read_range_batches(
        settings, topic, start, end, timeout=timeout, size=1000, config=READER
    ):
        yield from batch


def read_range_batches(
    settings: KafkaSettings,
    topic: str,
    start: Mapping[int, int] | None,
    end: Mapping[int, int],
    *,
    timeout: float = 60.0,
    size: int = 10_000,
    config: Mapping[str, object] = BULK_READER,
) -> Iterator[list[Record]]:
    """The records of ``[start, end)`` in lists of up to ``size`` as the client hands them
    over (a whole range read by one loop: no generator step per record)."""
    begin: Mapping[int, int] = start or {}
    todo = {p: e for p, e in end.items() if e > begin.get(p, 0)}
    if not todo:
        return
    consumer = KafkaConsumer(settings, topic, config)
    try:
        consumer.assign({p: begin.get(p, BEGINNING) for p in todo})
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"timed out reading {topic}: partitions {sorted(todo)} unfinished"
                )
            batch = []
            for record in consumer.consume(size, 0.5):
                partition, offset = record.partition(), record.offset()
                if partition is None or offset is None:
                    continue
                last = todo.get(partition)
                if last is None or offset >= last:
                    continue
                batch.append(record)
                if offset + 1 >= last:
                    del todo[partition]
            if batch:
                yield batch
    finally:
        consumer.close()


# What an offset holds, read back: (key, value).
Stored = tuple[bytes | None, bytes | None]


def read_offsets(
    settings: KafkaSettings, topic: str, wanted: Mapping[int, set[int]], *, near: int = 1_000
) -> tuple[dict[tuple[int, int], Stored], set[tuple[int, int]]]:
    """The messages at the ``wanted`` offsets of each partition, read back: what each
    holds, and the offsets below the log start (gone: retention or a deletion took
    them). An offset at or past the end, or one that holds no message, is in neither.
    Offsets within ``near`` of each other are read in one pass."""
    held: dict[tuple[int, int], Stored] = {}
    gone: set[tuple[int, int]] = set()
    if not wanted:
        return held, gone
    marks = watermarks(settings, topic)
    for partition, offsets in wanted.items():
        low, high = marks.low.get(partition, 0), marks.high.get(partition, 0)
        gone.update((partition, o) for o in offsets if o < low)
        inside = sorted(o for o in offsets if low <= o < high)
        while inside:
            run = [inside.pop(0)]
            while inside and inside[0] - run[-1] <= near:
                run.append(inside.pop(0))
            for record in read_range(
                settings, topic, {partition: run[0]}, {partition: run[-1] + 1}
            ):
                offset = record.offset() or 0
                if offset in offsets:
                    held[(partition, offset)] = (record.key(), record.value())
    return held, gone
