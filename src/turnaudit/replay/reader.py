"""Reading a replay's range from Kafka (and the archive in front of it) in the block order.

One consumer (``KafkaConsumer``) is assigned every unfinished partition of the
range by hand at its next offset: it joins no consumer group and commits
nothing. What it fetches goes into the pure :class:`~turnaudit.replay.order.BlockOrder`,
which says what comes out next and which partitions to pause.

With an archive (:class:`~turnaudit.archive.reading.ArchiveFeed`), a partition whose
next offset the archive holds is read from its segments, the records offered to the
same block order as the topic's, and is assigned to the consumer only once the
archive's records of it are used up, at the offset after the archive's last: the
hand-over takes no offset twice and skips none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Protocol

from turnaudit.archive.reading import ArchiveFeed
from turnaudit.errors import BrokerError
from turnaudit.kafka.consumer import BULK_READER, KafkaConsumer
from turnaudit.kafka.groups import own_group
from turnaudit.records import Record
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.replay.order import BLOCK_MESSAGES, BlockOrder
from turnaudit.settings import KafkaSettings

# librdkafka: a bulk reader's (a replay reads, it does not wait), offsets never stored.
READER_CONFIG: dict[str, object] = {**BULK_READER, "enable.auto.offset.store": False}


class AssignedConsumer(Protocol):
    """What the reader asks of its consumer (``KafkaConsumer``; a test's fake broker)."""

    def assign(self, starts: Mapping[int, int]) -> None: ...
    def consume(self, max_records: int, timeout: float) -> list[Record]: ...
    def pause(self, partitions: list[int]) -> None: ...
    def resume(self, partitions: list[int]) -> None: ...
    def close(self) -> None: ...


class OrderedReader:
    """The range's messages in the block order, from one consumer assigned every partition
    (and from ``archive`` where it holds a partition's next offsets).

    Advances ``state.next``, ``state.cursor`` and ``state.taken`` as it hands
    out messages, so the state at any batch boundary resumes the same order.
    ``connect``: the consumer to read with (default: a ``KafkaConsumer`` of the topic).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        state: ReplayCheckpoint,
        *,
        timeout: float = 300.0,
        archive: ArchiveFeed | None = None,
        connect: Callable[[], AssignedConsumer] | None = None,
    ) -> None:
        self._settings = settings
        self._state = state
        self._timeout = timeout
        self._order = BlockOrder(state)
        self._archive = archive
        self._connect = connect or self._kafka

    def _kafka(self) -> AssignedConsumer:
        return KafkaConsumer(
            self._settings,
            self._state.topic,
            READER_CONFIG,
            group_id=own_group(self._settings, "replay-reader"),
        )

    def batches(self, batch_size: int) -> Iterator[list[Record]]:
        order, feed = self._order, self._archive
        if not order.active:
            return
        topic = self._state.topic
        # Partitions read from the archive first: their records, a segment opened when
        # the one before is used up; the rest from the topic.
        archived = {
            p: feed.records(p, at)
            for p, at in order.starts.items()
            if feed is not None and feed.archived(p, at)
        }
        live = {p for p in order.starts if p not in archived}
        consumer = self._connect()
        try:
            consumer.assign({p: at for p, at in order.starts.items() if p in live})
            last_message = time.monotonic()
            while order.active:
                batch = order.emit(batch_size)
                if batch:
                    yield batch
                    continue
                if not order.active:
                    break
                waiting = order.waiting
                if waiting in archived:
                    if not self._from_archive(archived[waiting]):
                        del archived[waiting]
                        self._go_live(consumer, waiting, live)
                    last_message = time.monotonic()
                elif self._fetch(consumer, live):
                    last_message = time.monotonic()
                elif time.monotonic() - last_message > self._timeout:
                    raise BrokerError(
                        f"no message of {topic} for {self._timeout:.0f} s: partitions "
                        f"{order.active} unfinished (next offsets {order.starts})"
                    )
        finally:
            consumer.close()

    def _from_archive(self, records: Iterator[Record]) -> bool:
        """Offer a block of the archive's next records; False when it has none left."""
        offered = False
        for record in islice(records, BLOCK_MESSAGES):
            self._order.offer(record)
            offered = True
        return offered

    def _go_live(self, consumer: AssignedConsumer, partition: int, live: set[int]) -> None:
        """The archive's records of ``partition`` are used up: the topic goes on right
        after the last of them (every live partition reassigned where its next record
        to offer is; the consumer forgets its pauses)."""
        assert self._archive is not None  # only partitions the archive fed get here
        reached, upto = self._order.fetched(partition), self._archive.upto[partition]
        if reached < upto:
            raise BrokerError(
                f"the archive's segments of {self._state.topic} partition {partition} end "
                f"at offset {reached - 1}, their names at {upto - 1}: run turnaudit archive "
                "check"
            )
        live.add(partition)
        order = self._order
        consumer.assign({p: order.fetched(p) for p in live if p in order.active})
        was_paused = [p for p in order.forget_pauses() if p in live]
        if was_paused:  # librdkafka may keep an application's pause across an assignment
            consumer.resume(was_paused)

    def _fetch(self, consumer: AssignedConsumer, live: set[int]) -> bool:
        """Buffer what the broker sent; False when nothing came."""
        stop, go = self._order.flow()
        stop, go = [p for p in stop if p in live], [p for p in go if p in live]
        if stop:
            consumer.pause(stop)
        if go:
            consumer.resume(go)
        got = consumer.consume(10_000, 0.2)
        for record in got:
            self._order.offer(record)
        return bool(got)
