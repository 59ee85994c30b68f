"""The one consumer wrapper: group members and assigned readers.

The librdkafka client is built lazily, on first use, from the project's
settings; positions are plain ``{partition: offset}`` mappings of one topic;
records come back as ``turnaudit.records.Record`` (librdkafka's messages, not
copied); errors become ``ClientError`` or ``BrokerError``. A group member gets
its rebalances through a ``RebalanceListener`` that speaks partitions, not
``TopicPartition`` lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from turnaudit.errors import BrokerError
from turnaudit.kafka.groups import own_group
from turnaudit.records import ClientError, Record
from turnaudit.settings import KafkaSettings

BEGINNING = OFFSET_BEGINNING
END = OFFSET_END
# librdkafka's own log lines (one per failed connection attempt) stay off
# stderr; errors reach the error callback or the caller.
QUIET: dict[str, int] = {"log_level": 0}
# A reader that commits nothing and reads only what it is assigned.
READER: dict[str, int | bool] = {
    **QUIET,
    "enable.auto.commit": False,
    "enable.partition.eof": False,
}
# Large fetches and a deep local queue: a backlog read as fast as it comes.
BULK_FETCH: dict[str, int] = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.min.messages": 200_000,
    "queued.max.messages.kbytes": 256 * 1024,
}
# The reader of a long range: the bulk fetch, and no hurry for a quiet partition.
BULK_READER: dict[str, int | bool] = {**READER, **BULK_FETCH, "fetch.wait.max.ms": 100}

ErrorCallback = Callable[[ClientError], None]
# A commit the broker refuses while the group rebalances (or the client closes).
_REBALANCING = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError._DESTROY,
    }
)


def client_error(error: KafkaError) -> ClientError:
    """The project's copy of a librdkafka error."""
    return ClientError(
        name=error.name(),
        text=error.str(),
        fatal=error.fatal(),
        retriable=error.retriable(),
        brokers_down=error.code() == KafkaError._ALL_BROKERS_DOWN,
    )


def error_callback(on_error: ErrorCallback) -> Callable[[KafkaError], None]:
    """librdkafka's ``error_cb`` that hands the project's error on."""
    return lambda error: on_error(client_error(error))


class RebalanceListener(Protocol):
    """What a group member is told when its partitions change."""

    def assigned(self, partitions: list[int]) -> Mapping[int, int]:
        """Partitions given to this member; returns start offsets for some of them
        (the others resume from the group's committed offsets)."""
        ...

    def revoked(self, partitions: set[int]) -> None:
        """Partitions moving to another member: commit what is done, then forget them."""
        ...

    def lost(self, partitions: set[int]) -> None:
        """Partitions another member owns already: forget them, commit nothing."""
        ...


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed position, with the metadata stored beside it."""

    offset: int  # negative: nothing committed
    metadata: str | None = None


class KafkaConsumer:
    """A consumer of one topic: a group member (``subscribe``) or a reader (``assign``)."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *config: Mapping[str, Any],
        group_id: str | None = None,
        on_error: ErrorCallback | None = None,
        on_stats: Callable[[str], None] | None = None,
        fixed: Mapping[str, Any] | None = None,
    ) -> None:
        """``config``: defaults the user's ``TURNAUDIT_KAFKA_OPTIONS`` may change;
        ``fixed``: options the caller's guarantees rest on, which nothing overrides.
        Without ``group_id`` the consumer gets a fresh group in its principal's
        namespace (``turnaudit.kafka.groups``) that it never commits to (librdkafka
        needs one)."""
        self.topic = topic
        self._config = settings.client_config(
            *config,
            **{"group.id": group_id or own_group(settings, "reader")},
            **({"error_cb": error_callback(on_error)} if on_error is not None else {}),
            **({"stats_cb": on_stats} if on_stats is not None else {}),
            **(fixed or {}),
        )
        self._on_error = on_error
        self._consumer: Consumer | None = None

    @property
    def group_id(self) -> str:
        """The consumer group this consumer joins or reads through."""
        return str(self._config["group.id"])

    @property
    def _client(self) -> Consumer:
        if self._consumer is None:
            try:
                self._consumer = Consumer(self._config)
            except KafkaException as exc:
                raise BrokerError(f"cannot create a consumer of {self.topic}: {exc}") from exc
        return self._consumer

    def _partitions(self, offsets: Mapping[int, int]) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p, o) for p, o in offsets.items()]

    # -- membership --------------------------------------------------------------------
    def subscribe(self, listener: RebalanceListener) -> None:
        """Join the group; ``listener`` hears every assignment, revocation and loss.
        Partitions it returns no start for resume from the group's committed offsets."""

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            starts = listener.assigned([tp.partition for tp in partitions])
            for tp in partitions:
                start = starts.get(tp.partition)
                if start is not None:
                    tp.offset = start
            if starts:
                consumer.assign(partitions)

        self._join(listener, on_assign)

    def subscribe_assigning(self, listener: RebalanceListener) -> None:
        """Join the group, reading only the partitions ``listener.assigned`` returns a
        start for: the others stay this member's in the group, unread."""

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            starts = listener.assigned([tp.partition for tp in partitions])
            consumer.assign(self._partitions(starts))

        self._join(listener, on_assign)

    def _join(
        self,
        listener: RebalanceListener,
        on_assign: Callable[[Consumer, list[TopicPartition]], None],
    ) -> None:
        def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            listener.revoked({tp.partition for tp in partitions})

        def on_lost(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            listener.lost({tp.partition for tp in partitions})

        self._client.subscribe(
            [self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )

    @contextmanager
    def _failing_as(self, action: str) -> Iterator[None]:
        """librdkafka's exception as the project's ``BrokerError``, naming what failed."""
        try:
            yield
        except KafkaException as exc:
            raise BrokerError(f"cannot {action} {self.topic}: {exc}") from exc

    def assign(self, starts: Mapping[int, int]) -> None:
        """Read these partitions from these offsets (``BEGINNING``, ``END`` allowed)."""
        with self._failing_as("assign partitions of"):
            self._client.assign(self._partitions(starts))

    # -- reading -----------------------------------------------------------------------
    def consume(self, max_records: int, timeout: float) -> list[Record]:
        """Up to ``max_records`` records; client errors in the batch go to ``on_error``
        (a reader without one gets ``BrokerError``), a fatal one always raises."""
        try:
            messages = self._client.consume(max_records, timeout)
        except KafkaException as exc:
            raise BrokerError(f"reading {self.topic}: {exc}") from exc
        for msg in messages:
            if msg.error() is not None:
                return self._without_errors(messages)
        return messages  # type: ignore[return-value]  # Message satisfies Record

    def _without_errors(self, messages: list[Message]) -> list[Record]:
        records: list[Record] = []
        for msg in messages:
            error = msg.error()
            if error is None:
                records.append(msg)
            elif error.code() == KafkaError._PARTITION_EOF:
                continue
            elif error.fatal() or self._on_error is None:
                raise BrokerError(f"reading {self.topic}: {error.str()}")
            else:
                self._on_error(client_error(error))
        return records

    def pause(self, partitions: Iterable[int]) -> None:
        with self._failing_as("pause partitions of"):
            self._client.pause([TopicPartition(self.topic, p) for p in partitions])

    def resume(self, partitions: Iterable[int]) -> None:
        with self._failing_as("resume partitions of"):
            self._client.resume([TopicPartition(self.topic, p) for p in partitions])

    def seek(self, partition: int, offset: int) -> None:
        with self._failing_as("seek in"):
            self._client.seek(TopicPartition(self.topic, partition, offset))

    def seek_each(self, offsets: Mapping[int, int]) -> bool:
        """Seek each partition; False (the rest not sought) when one cannot be sought
        yet (a partition just assigned, not fetching)."""
        try:
            for partition, offset in offsets.items():
                self._client.seek(TopicPartition(self.topic, partition, offset))
        except KafkaException:
            return False
        return True

    # -- positions ---------------------------------------------------------------------
    def store(self, offsets: Mapping[int, int]) -> None:
        """Store next offsets for the auto-committer (``enable.auto.offset.store=false``)."""
        with self._failing_as("store offsets of"):
            self._client.store_offsets(offsets=self._partitions(offsets))

    def commit(
        self,
        offsets: Mapping[int, int],
        metadata: Mapping[int, str] | None = None,
    ) -> None:
        """Commit next offsets now, with optional metadata per partition."""
        try:
            self._commit(offsets, metadata)
        except KafkaException as exc:
            raise BrokerError(f"cannot commit offsets of {self.topic}: {exc}") from exc

    def commit_unless_rebalancing(
        self, offsets: Mapping[int, int], metadata: Mapping[int, str] | None = None
    ) -> bool:
        """``commit``, or False when the broker refuses it because the group is
        rebalancing (the revocation that follows is the time to commit)."""
        try:
            self._commit(offsets, metadata)
        except KafkaException as exc:
            if exc.args[0].code() in _REBALANCING:
                return False
            raise BrokerError(f"cannot commit offsets of {self.topic}: {exc}") from exc
        return True

    def _commit(self, offsets: Mapping[int, int], metadata: Mapping[int, str] | None) -> None:
        # A TopicPartition's metadata is set when it is built (the attribute is read-only).
        noted = metadata or {}
        partitions = [
            TopicPartition(self.topic, p, o, metadata=noted[p])
            if p in noted
            else TopicPartition(self.topic, p, o)
            for p, o in offsets.items()
        ]
        self._client.commit(offsets=partitions, asynchronous=False)

    def committed(self, partitions: Iterable[int], timeout: float) -> dict[int, Committed]:
        try:
            found = self._client.committed(
                [TopicPartition(self.topic, p) for p in partitions], timeout=timeout
            )
        except KafkaException as exc:
            raise BrokerError(f"cannot read committed offsets of {self.topic}: {exc}") from exc
        return {tp.partition: Committed(tp.offset, tp.metadata) for tp in found}

    def positions(self, partitions: Iterable[int]) -> dict[int, int]:
        """The next offset each assigned partition fetches (negative before the first)."""
        with self._failing_as("read positions of"):
            found = self._client.position([TopicPartition(self.topic, p) for p in partitions])
        return {tp.partition: tp.offset for tp in found}

    # -- another topic's shape, through this client (no consumer of its own) -----------
    def partitions_of(self, topic: str, timeout: float = 10.0) -> list[int]:
        with self._failing_as("describe"):
            found = self._client.list_topics(topic, timeout=timeout).topics.get(topic)
        if found is None or found.error is not None:
            raise BrokerError(f"topic {topic} does not exist")
        return sorted(found.partitions)

    def watermarks_of(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        """(log start, high watermark) of a partition of ``topic``, asked of the broker."""
        with self._failing_as("read watermarks through"):
            low, high = self._client.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout
            )
        return int(low), int(high)

    def close(self) -> None:
        """Leave the group (a dynamic member's partitions move at once) and close."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
