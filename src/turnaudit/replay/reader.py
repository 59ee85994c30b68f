"""Reading a replay's range from Kafka in the block order.

One consumer (``KafkaConsumer``) is assigned every unfinished partition of the
range by hand at its next offset: it joins no consumer group and commits
nothing. What it fetches goes into the pure :class:`~turnaudit.replay.order.BlockOrder`,
which says what comes out next and which partitions to pause.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from turnaudit.errors import BrokerError
from turnaudit.kafka.consumer import KafkaConsumer
from turnaudit.kafka.groups import own_group
from turnaudit.records import Record
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.replay.order import BlockOrder
from turnaudit.settings import KafkaSettings

# librdkafka: fetch large and keep a deep local queue (a replay reads, it does not wait).
READER_CONFIG: dict[str, object] = {
    "log_level": 0,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.min.messages": 200_000,
    "queued.max.messages.kbytes": 256 * 1024,
    "fetch.wait.max.ms": 100,
}


class OrderedReader:
    """The range's messages in the block order, from one consumer assigned every partition.

    Advances ``state.next``, ``state.cursor`` and ``state.taken`` as it hands
    out messages, so the state at any batch boundary resumes the same order.
    """

    def __init__(
        self, settings: KafkaSettings, state: ReplayCheckpoint, *, timeout: float = 300.0
    ) -> None:
        self._settings = settings
        self._state = state
        self._timeout = timeout
        self._order = BlockOrder(state)

    def batches(self, batch_size: int) -> Iterator[list[Record]]:
        order = self._order
        if not order.active:
            return
        topic = self._state.topic
        consumer = KafkaConsumer(
            self._settings,
            topic,
            READER_CONFIG,
            group_id=own_group(self._settings, "replay-reader"),
        )
        try:
            consumer.assign(order.starts)
            last_message = time.monotonic()
            while order.active:
                batch = order.emit(batch_size)
                if batch:
                    yield batch
                elif order.active:
                    if self._fetch(consumer):
                        last_message = time.monotonic()
                    elif time.monotonic() - last_message > self._timeout:
                        raise BrokerError(
                            f"no message of {topic} for {self._timeout:.0f} s: partitions "
                            f"{order.active} unfinished (next offsets {order.starts})"
                        )
        finally:
            consumer.close()

    def _fetch(self, consumer: KafkaConsumer) -> bool:
        """Buffer what the broker sent; False when nothing came."""
        stop, go = self._order.flow()
        if stop:
            consumer.pause(stop)
        if go:
            consumer.resume(go)
        got = consumer.consume(10_000, 0.2)
        for record in got:
            self._order.offer(record)
        return bool(got)
