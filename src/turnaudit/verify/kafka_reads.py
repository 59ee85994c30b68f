"""What verify reads from Kafka: the range's messages into a ``Verifier``, and the
dead letters of the range (no consumer group, nothing committed)."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from turnaudit.checkpoints import Checkpoint, decode_checkpoint
from turnaudit.dead_letters import read_dead_letter_headers
from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.kafka.reading import read_range, read_range_batches
from turnaudit.records import record_headers
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
) -> None:
    """Every message of ``[start, end)`` into ``verifier``, each partition by offset."""
    # The read makes no reference cycles (the verifier's tables are native), but its
    # batches of client messages would set off the cyclic collector thousands of times.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for batch in read_range_batches(settings, topic, start, end, timeout=timeout):
            verifier.feed_batch(batch)
    finally:
        if collecting:
            gc.enable()


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
    settings: KafkaSettings, timeout: float = 60.0
) -> LatestAnnouncements:
    """The last announcement of each stream on ``<prefix>stream-heads`` (none when the
    topic does not exist: publishers before stream heads never created it)."""
    topic = settings.topics.stream_heads
    latest = LatestAnnouncements()
    try:
        heads = resolve_range(settings, topic, RangeSpec())
    except BrokerError:
        return latest
    latest.add_values(
        msg.value() for msg in read_range(settings, topic, heads.start, heads.end, timeout=timeout)
    )
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


def read_checkpoints(settings: KafkaSettings, timeout: float = 60.0) -> CheckpointsRead:
    """The checkpoints topic as read (empty when the topic does not exist)."""
    topic = settings.topics.checkpoints
    found_all = CheckpointsRead()
    try:
        found = resolve_range(settings, topic, RangeSpec())
    except BrokerError:
        return found_all
    out, offsets = found_all.read, found_all.offsets
    found_all.log_start_moved = any(o > 0 for o in found.log_start.values())
    other = 0
    for msg in read_range(settings, topic, found.start, found.end, timeout=timeout):
        checkpoint = decode_checkpoint(msg.value())
        if checkpoint is None:
            other += msg.value() is not None  # a tombstone is compaction's, not a forgery
            continue
        kind, stamp = msg.timestamp()
        out.append((checkpoint, stamp if kind == LOG_APPEND_TIME else None))
        offsets.setdefault(checkpoint.digest(), msg.offset() or 0)
    found_all.not_checkpoints = other
    return found_all
