"""``turnaudit archive run``: the archiver, a service on the consumer runtime.

It reads a topic (the turn events by default; the checkpoints and stream heads too, one
service each) in its own consumer group and writes every record, as the broker held it,
into sealed segments of the archive, with signed digests (``turnaudit.archive``).

Nothing is decoded or judged: its validation hands each batch's records to the sink
whole (``examine_batch``), so an undecodable record is archived like any other and no
record is dead-lettered. At-least-once: the offsets the runtime stores never pass the
first record not yet in a written segment (``held_offsets``); a record read again after
a restart is skipped when a written segment holds it already (counted ``reread``), so a
restart writes no segment twice and leaves no gap (``turnaudit.archive.writer``).

Every store call happens in ``flush``, ``tick`` or ``close``, where a failure is retried
by the runtime; a partition is loaded from the archive at its first flush after it was
assigned. Metrics (labels: the partition, a bounded set): ``turnaudit_archive_*``; the
archive's lag in records is the runtime's consumer lag, since stored offsets wait for
the segments.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from turnaudit.archive.location import open_archive
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.settings import DIR_ENV, ArchiveSettings
from turnaudit.archive.store import ArchiveStore
from turnaudit.archive.writer import PartitionArchive, load_partition
from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService, Rejection, Sink, Validation
from turnaudit.consumers.runtime.handover import HandedBatch
from turnaudit.consumers.runtime.settings import ServiceSettings
from turnaudit.dead_letters import DeadLetterReason
from turnaudit.kafka.topics import topic_retention_ms
from turnaudit.records import Record

log = structlog.get_logger("turnaudit.archive")

# A temporary file older than this was left by a killed archiver, not one writing now.
_PARTIAL_AGE_S = 3600.0


class ArchiveMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter(
            "turnaudit_archive_records_total", "Records written into segments.", registry=registry
        )
        self.reread = Counter(
            "turnaudit_archive_reread_total",
            "Records read again after a restart and skipped: a written segment holds them.",
            registry=registry,
        )
        self.segments = Counter(
            "turnaudit_archive_segments_total", "Segments written.", registry=registry
        )
        self.bytes = Counter(
            "turnaudit_archive_bytes_total", "Bytes of segments written.", registry=registry
        )
        self.digests = Counter(
            "turnaudit_archive_digests_total", "Signed digests written.", registry=registry
        )
        self.archived_offset = Gauge(
            "turnaudit_archive_archived_offset",
            "Last offset of the partition in a written segment.",
            ["partition"],
            registry=registry,
        )
        self.last_digest = Gauge(
            "turnaudit_archive_last_digest_timestamp_seconds",
            "When the partition's last digest was signed (its age: time() minus this).",
            ["partition"],
            registry=registry,
        )

        self.oldest_unarchived = Gauge(
            "turnaudit_archive_oldest_unarchived_timestamp_seconds",
            "Timestamp of the partition's first record taken and not yet in a written segment "
            "(absent: none); its age against the topic's retention is how far behind it is.",
            ["partition"],
            registry=registry,
        )
        self.undigested = Gauge(
            "turnaudit_archive_undigested_segments",
            "Segments written and in no digest yet.",
            ["partition"],
            registry=registry,
        )
        self.retention = Gauge(
            "turnaudit_archive_topic_retention_seconds",
            "The archived topic's retention.ms, read at start (absent: unknown or for ever).",
            registry=registry,
        )

    def forget(self, partition: int) -> None:
        for gauge in (
            self.archived_offset,
            self.last_digest,
            self.oldest_unarchived,
            self.undigested,
        ):
            with contextlib.suppress(KeyError):  # nothing exported for it yet
                gauge.remove(str(partition))


class ArchiveSink(Sink):
    """Takes each batch's records whole (``take_records``) and archives them."""

    marks_redeliveries = False  # it tracks its own progress: the archive's segments

    def __init__(
        self,
        settings: ArchiveSettings,
        registry: CollectorRegistry,
        *,
        archive: ArchiveStore | None = None,
        clock: Callable[[], float] = time.time,
        topic: str | None = None,
    ) -> None:
        self._settings = settings
        # Known: a partition is loaded as it is assigned (its gauges at once, even when
        # no record of it comes); else at its first record.
        self._topic = topic
        self._policy = settings.policy
        self._archive = archive or open_archive(str(settings.location), label=DIR_ENV, create=True)
        self._clock = clock
        self.metrics = ArchiveMetrics(registry)
        self._pending: dict[int, list[ArchivedRecord]] = {}  # taken, not yet placed
        self.partitions: dict[int, PartitionArchive] = {}  # loaded
        self._archive.clear_partials(_PARTIAL_AGE_S, clock())

    # -- the validation's hand-over ------------------------------------------------------
    def take_records(self, records: Sequence[Record]) -> HandedBatch:
        batch = HandedBatch()
        for record in records:
            partition, offset = record.partition(), record.offset()
            if partition is None or offset is None or record.topic() is None:
                continue  # only librdkafka's error events lack a position
            self._pending.setdefault(partition, []).append(ArchivedRecord.of(record))
            batch.next_offsets[partition] = offset + 1
            batch.handed += 1
        return batch

    # -- the runtime's hooks ---------------------------------------------------------------
    def take(self, turn: ConsumedTurn) -> None:
        return  # records come whole through take_records

    def flush(self) -> None:
        self._place()
        self._write(self._clock())

    def tick(self) -> None:
        now = self._clock()
        for state in self.partitions.values():
            state.cut_quiet(now, self._policy)
        self._write(now)

    def held_offsets(self) -> Mapping[int, int]:
        held = {}
        for partition, records in self._pending.items():
            if records:
                held[partition] = records[0].offset
        for partition, state in self.partitions.items():
            first = state.held()
            if first is not None:
                held[partition] = min(first, held.get(partition, first))
        return held

    def partitions_assigned(self, partitions: set[int]) -> None:
        """Each partition loaded from the archive now (a failure here is retried at its
        first record)."""
        if self._topic is None:
            return
        for p in sorted(partitions):
            if p not in self.partitions:
                self._load(self._topic, p)

    def partitions_revoked(self, partitions: set[int]) -> None:
        """A partition handed on (a rebalance, or the service stopping) is left written
        and digested: its open segment too. What cannot be written is dropped: its offsets
        were held, so the next owner reads it again."""
        self._place()
        now = self._clock()
        for p in sorted(partitions):
            state = self.partitions.get(p)
            if state is not None:
                state.cut_open()
                try:
                    self._write_partition(p, state, now, force_digest=True)
                except Exception as exc:  # any store failure: the next owner writes it
                    log.warning("archive_handover_unwritten", partition=p, error=repr(exc))
            self._pending.pop(p, None)
            self.partitions.pop(p, None)
            self.metrics.forget(p)

    def close(self) -> None:
        """A clean stop: every open segment written and a last digest signed."""
        self._place()
        for state in self.partitions.values():
            state.cut_open()
        self._write(self._clock(), force_digest=True)

    # -- work ----------------------------------------------------------------------------
    def _place(self) -> None:
        for partition, records in self._pending.items():
            if not records:
                continue
            state = self.partitions.get(partition) or self._load(records[0].topic, partition)
            before = state.reread
            for record in records:
                state.take(record, self._policy)
            self.metrics.reread.inc(state.reread - before)
            records.clear()

    def _load(self, topic: str, partition: int) -> PartitionArchive:
        state = load_partition(self._archive, topic, partition)
        self.partitions[partition] = state
        log.info(
            "archive_partition_loaded",
            partition=partition,
            archived_through=state.archived_through,
            undigested=len(state.undigested),
            last_digest=None if state.last_digest is None else state.last_digest.index,
        )
        self._write_partition(partition, state, self._clock(), force_digest=False)
        return state

    def _write(self, now: float, *, force_digest: bool = False) -> None:
        for partition, state in self.partitions.items():
            self._write_partition(partition, state, now, force_digest=force_digest)

    def _write_partition(
        self, partition: int, state: PartitionArchive, now: float, *, force_digest: bool
    ) -> None:
        m = self.metrics
        for entry in state.write(self._archive, self._policy):
            m.segments.inc()
            m.records.inc(entry.records)
            m.bytes.inc(entry.bytes)
        if state.archived_through is not None:
            m.archived_offset.labels(str(partition)).set(state.archived_through)
        if state.undigested and (force_digest or state.digest_due(now, self._policy)):
            digest = state.write_digest(self._archive, self._settings.key, now)
            m.digests.inc()
            log.info(
                "archive_digest_written",
                partition=partition,
                index=digest.index,
                segments=len(digest.segments),
            )
        if state.last_digest is not None:
            m.last_digest.labels(str(partition)).set(state.last_digest_s)
        m.undigested.labels(str(partition)).set(len(state.undigested))
        oldest = state.oldest_unwritten()
        if oldest is None:
            with contextlib.suppress(KeyError):  # nothing held before either
                m.oldest_unarchived.remove(str(partition))
        else:
            m.oldest_unarchived.labels(str(partition)).set(oldest.timestamp / 1000)


class ArchiveValidation(Validation):
    """Hands every batch to the archive whole: nothing decoded, nothing rejected."""

    def __init__(self, sink: ArchiveSink) -> None:
        self._sink = sink

    def examine(
        self, value: bytes | None, key: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection:
        # Never called: examine_batch takes every batch.
        return Rejection(DeadLetterReason.UNDECODABLE, "the archive takes whole batches")

    def examine_batch(self, records: Sequence[Record]) -> HandedBatch | None:
        return self._sink.take_records(records)


def _retention_ms(settings: ServiceSettings, topic: str) -> int | None:
    """The topic's retention, for the alert that the archive falls behind it; a cluster
    that does not answer now leaves it unknown (the service starts all the same)."""
    try:
        return topic_retention_ms(settings.kafka, topic, timeout=5.0)
    except Exception as exc:  # any client failure: the gauge stays absent
        log.warning("archive_retention_unknown", topic=topic, error=repr(exc))
        return None


def archive_service(
    settings: ServiceSettings,
    archive: ArchiveSettings,
    *,
    registry: CollectorRegistry,
    topic: str | None = None,
    **options: Any,
) -> ConsumerService:
    """The archiver on ``topic`` (default: the turn events)."""
    topic = topic or settings.kafka.topics.turn_events
    sink = ArchiveSink(archive, registry, topic=topic)
    retention_ms = _retention_ms(settings, topic)
    if retention_ms is not None:
        sink.metrics.retention.set(retention_ms / 1000)
    return ConsumerService(
        settings,
        sink,
        registry=registry,
        topic=topic,
        validation=ArchiveValidation(sink),
        **options,
    )
