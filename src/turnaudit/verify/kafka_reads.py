"""What verify reads from Kafka: the range's messages into a ``Verifier``, and the
dead letters of the range (no consumer group, nothing committed).

With an archive (``verify --archive``), every topic verify reads whole (the turns' range,
the checkpoints, the stream heads) is read as one: the archive's segments up to their
last offset, the live topic the rest (``archived_then_live``), so a range whose start the
topics no longer hold gets the same proofs as before they were trimmed."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from turnaudit.archive.reading import (
    ArchivedRange,
    archived_batches,
    archived_segments,
    extend_into_archive,
)
from turnaudit.archive.segments import SegmentName
from turnaudit.archive.store import ArchiveStore
from turnaudit.checkpoints import Checkpoint, decode_checkpoint
from turnaudit.dead_letters import read_dead_letter_headers
from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.kafka.reading import read_range, read_range_batches
from turnaudit.records import Record, record_headers
from turnaudit.settings import KafkaSettings
from turnaudit.verify.crash import LatestAnnouncements
from turnaudit.verify.report import DeadLetters
from turnaudit.verify.verifier import Verifier


def feed_range(
    settings: KafkaSettings,
    topic: str,
    verifier: Verifier,
    *,
    start: Mapping[int, int],
    end: Mapping[int, int],
    timeout: float,
    archived: ArchiveInFront | None = None,
) -> None:
    """Every message of ``[start, end)`` into ``verifier``, each partition by offset
    (``archived``: the archive's segments first, ``start`` moved into them)."""
    # The read makes no reference cycles (the verifier's tables are native), but its
    # batches of client messages would set off the cyclic collector thousands of times.
    collecting = gc.isenabled()
    gc.disable()
    try:
        batches = (
            read_range_batches(settings, topic, start, end, timeout=timeout)
            if archived is None
            else archived_then_live(settings, topic, archived, end, timeout=timeout)
        )
        for batch in batches:
            verifier.feed_batch(batch)
    finally:
        if collecting:
            gc.enable()


@dataclass(frozen=True)
class ArchiveInFront:
    """An archive in front of a topic's range: its segments of the topic, the range with
    its start moved into them (``extend_into_archive``), and the topic's own log start."""

    archive: ArchiveStore
    segments: dict[int, list[SegmentName]]
    reach: ArchivedRange
    live_low: dict[int, int]

    @classmethod
    def of(
        cls,
        archive: ArchiveStore,
        topic: str,
        start: Mapping[int, int],
        end: Mapping[int, int],
        low: Mapping[int, int],
    ) -> ArchiveInFront:
        segments = archived_segments(archive, topic)
        return cls(archive, segments, extend_into_archive(segments, start, end, low), dict(low))


def archived_then_live(
    settings: KafkaSettings,
    topic: str,
    archived: ArchiveInFront,
    end: Mapping[int, int],
    *,
    timeout: float,
) -> Iterator[Sequence[Record]]:
    """The range's records: the archive's up to where it feeds each partition, then the
    topic's from there (never below its log start) to ``end``. One reader for every topic
    verify reads with an archive."""
    reach = archived.reach
    yield from archived_batches(archived.archive, archived.segments, reach.start, reach.archived_to)
    yield from read_range_batches(
        settings, topic, reach.live_start(archived.live_low), end, timeout=timeout
    )


@dataclass(frozen=True)
class WholeTopic:
    """A topic read whole (with the archive in front, when there is one): its records in
    offset order per partition, and whether its log start (the archive's, where that is
    earlier) is past 0: records before it were removed."""

    records: Iterator[Record]
    log_start_moved: bool


def whole_topic(
    settings: KafkaSettings, topic: str, archive: ArchiveStore | None, timeout: float
) -> WholeTopic | None:
    """Every record of ``topic`` from its log start, or from the archive's first offset
    where that is earlier; None when neither the topic nor the archive holds it."""
    try:
        found = resolve_range(settings, topic, RangeSpec())
    except BrokerError:  # no such topic: what the archive holds of it, if anything
        segments = {} if archive is None else archived_segments(archive, topic)
        if archive is None or not segments:
            return None
        first = {p: names[0].first for p, names in segments.items()}
        until = {p: names[-1].last + 1 for p, names in segments.items()}
        return WholeTopic(
            (m for batch in archived_batches(archive, segments, first, until) for m in batch),
            any(o > 0 for o in first.values()),
        )
    if archive is None:
        return WholeTopic(
            read_range(settings, topic, found.start, found.end, timeout=timeout),
            any(o > 0 for o in found.log_start.values()),
        )
    archived = ArchiveInFront.of(archive, topic, found.start, found.end, found.log_start)
    return WholeTopic(
        (
            m
            for batch in archived_then_live(settings, topic, archived, found.end, timeout=timeout)
            for m in batch
        ),
        any(o > 0 for o in archived.reach.low.values()),
    )


def dead_letters_in_range(
    settings: KafkaSettings,
    topic: str,
    *,
    start: Mapping[int, int],
    end: Mapping[int, int],
    first_ms: int | None,
    last_ms: int | None,
) -> DeadLetters:
    """Dead letters of the range: consumer-side ones by their origin offset, producer-side
    ones (no origin offset) by time."""
    dlq = settings.topics.dlq
    by_reason: Counter[str] = Counter()
    by_stage: Counter[str] = Counter()
    positions: set[tuple[int, int]] = set()
    count = 0
    letters = resolve_range(settings, dlq, RangeSpec())
    for msg in read_range(settings, dlq, letters.start, letters.end):
        headers = read_dead_letter_headers(record_headers(msg))
        if headers.get("topic") != topic:
            continue
        partition, offset = headers.get("partition", ""), headers.get("offset", "")
        if partition and offset:
            p, o = int(partition), int(offset)
            if not start.get(p, 0) <= o < end.get(p, 0):
                continue
            positions.add((p, o))
        else:
            _, stamp = msg.timestamp()
            if first_ms is None or last_ms is None or not first_ms <= stamp <= last_ms:
                continue
        count += 1
        by_reason[headers.get("reason", "?")] += 1
        by_stage[headers.get("stage", "?")] += 1
    return DeadLetters(
        count, dict(sorted(by_reason.items())), dict(sorted(by_stage.items())), frozenset(positions)
    )


def stream_head_announcements(
    settings: KafkaSettings, timeout: float = 60.0, archive: ArchiveStore | None = None
) -> LatestAnnouncements:
    """The last announcement of each stream on ``<prefix>stream-heads`` (none when the
    topic does not exist: publishers before stream heads never created it), the
    archive's first where it holds what the topic no longer does."""
    latest = LatestAnnouncements()
    heads = whole_topic(settings, settings.topics.stream_heads, archive, timeout)
    if heads is not None:
        latest.add_values(msg.value() for msg in heads.records)
    return latest


# librdkafka's timestamp type of a time the broker stamped (the topic's LogAppendTime).
LOG_APPEND_TIME = 2


@dataclass
class CheckpointsRead:
    """Every checkpoint on ``<prefix>checkpoints`` with the time the broker appended it
    (None when the broker did not stamp it), where each was read (offset, by digest), and
    the count of records that are not checkpoints, and whether the topic's log start is
    past 0 (retention, or ``delete_records``, removed its first records)."""

    read: list[tuple[Checkpoint, int | None]] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    not_checkpoints: int = 0
    log_start_moved: bool = False


def read_checkpoints(
    settings: KafkaSettings, timeout: float = 60.0, archive: ArchiveStore | None = None
) -> CheckpointsRead:
    """The checkpoints topic as read (empty when the topic does not exist), the archive's
    first where it holds what the topic no longer does."""
    found_all = CheckpointsRead()
    found = whole_topic(settings, settings.topics.checkpoints, archive, timeout)
    if found is None:
        return found_all
    out, offsets = found_all.read, found_all.offsets
    found_all.log_start_moved = found.log_start_moved
    other = 0
    for msg in found.records:
        checkpoint = decode_checkpoint(msg.value())
        if checkpoint is None:
            other += msg.value() is not None  # a tombstone is compaction's, not a forgery
            continue
        kind, stamp = msg.timestamp()
        out.append((checkpoint, stamp if kind == LOG_APPEND_TIME else None))
        offsets.setdefault(checkpoint.digest(), msg.offset() or 0)
    found_all.not_checkpoints = other
    return found_all
