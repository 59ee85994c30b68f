"""The archive read as the topic: ``verify --archive`` and ``replay --archive`` take a
range's start from the archive's segments and its rest from the live topic.

``extend_into_archive`` moves a range that starts at the topic's log start back to the
archive's first offset (the archive is then the log's start) and says, per partition, up
to where the archive feeds it; ``archived_batches`` (verify) and ``ArchiveFeed.records``
(replay) hand the archived records of a range as consumed records (``ArchivedMessage``),
each with its original key, value, headers, timestamp and timestamp type.
``ArchiveFeed.hand_over`` says where the live topic takes over and refuses a range whose
offsets neither the archive nor the topic holds (``ArchiveGap``).
Segments are read as they are: ``turnaudit archive check`` says whether they are intact.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from turnaudit.archive.segments import (
    SEGMENT_FOLDER,
    ArchivedRecord,
    SegmentName,
    decode_segment,
    partition_folder,
)
from turnaudit.archive.store import ArchiveStore
from turnaudit.errors import BrokerError


class ArchiveGap(BrokerError):
    """Offsets of a range that neither the archive nor the live topic holds: the topic's
    retention ran past the archive's end (a runtime fact about the cluster, exit 1)."""


def archived_segments(archive: ArchiveStore, topic: str) -> dict[int, list[SegmentName]]:
    """Per partition, the segments of ``topic`` in the archive, in offset order."""
    found: dict[int, list[SegmentName]] = {}
    for folder in archive.folders(topic):
        if not folder.isdigit():
            continue
        partition = int(folder)
        for path in archive.files(f"{partition_folder(topic, partition)}/{SEGMENT_FOLDER}"):
            name = SegmentName.parse(topic, partition, path.rsplit("/", 1)[1])
            if name is not None:
                found.setdefault(partition, []).append(name)
    return {p: sorted(names) for p, names in found.items()}


def whole_archive(
    archive: ArchiveStore, topic: str
) -> tuple[dict[int, list[SegmentName]], dict[int, int], dict[int, int]]:
    """Everything the archive holds of ``topic``: its segments per partition, and the
    first and the end offset of each partition (what an export reads)."""
    segments = archived_segments(archive, topic)
    start = {p: names[0].first for p, names in segments.items()}
    until = {p: names[-1].last + 1 for p, names in segments.items()}
    return segments, start, until


@dataclass(frozen=True)
class ExportSummary:
    """What an export of the archive wrote (``archive export``, either format)."""

    topic: str
    records: int
    undecodable: int
    partitions: int

    def human(self) -> str:
        return (
            f"exported {self.records} records ({self.undecodable} undecodable) of {self.topic} "
            f"from {self.partitions} partitions"
        )


@dataclass(frozen=True, slots=True)
class ArchivedMessage:
    """An archived record read as a consumed one (``turnaudit.records.Record``)."""

    stored: ArchivedRecord

    def topic(self) -> str | None:
        return self.stored.topic

    def partition(self) -> int | None:
        return self.stored.partition

    def offset(self) -> int | None:
        return self.stored.offset

    def key(self) -> bytes | None:
        return self.stored.key

    def value(self) -> bytes | None:
        return self.stored.value

    def headers(self) -> object:
        return list(self.stored.headers) or None  # librdkafka: None when there are none

    def timestamp(self) -> tuple[int, int]:
        return (self.stored.timestamp_type, self.stored.timestamp)


@dataclass(frozen=True)
class ArchivedRange:
    """A range reaching into the archive: where it starts, the log start it is judged
    against, and up to where (exclusive) the archive feeds each partition."""

    start: dict[int, int]
    low: dict[int, int]
    archived_to: dict[int, int]

    def live_start(self, live_low: Mapping[int, int]) -> dict[int, int]:
        """Where the live topic takes over: after the archive, never below its log start."""
        return {
            p: max(s, self.archived_to.get(p, s), live_low.get(p, 0)) for p, s in self.start.items()
        }


def extend_into_archive(
    segments: Mapping[int, list[SegmentName]],
    start: Mapping[int, int],
    end: Mapping[int, int],
    low: Mapping[int, int],
) -> ArchivedRange:
    """The range ``[start, end)`` of the live topic (log start ``low``) with the archive in
    front: a partition read from its log start starts at the archive's first offset when
    that is earlier; the archive feeds it up to its last archived offset (within the range).
    An archive that begins after the range's start feeds none of it (the topic holds the
    start, and the archive lacks the offsets before its first)."""
    new_start, new_low, archived_to = dict(start), dict(low), {}
    for p, stop in end.items():
        names = segments.get(p)
        if not names:
            continue
        first, last = names[0].first, names[-1].last
        begin = start.get(p, 0)
        if begin == low.get(p, 0) and first < begin:
            begin = first
            new_low[p] = first
        new_start[p] = begin
        if first <= begin:
            archived_to[p] = max(begin, min(last + 1, stop))
    return ArchivedRange(new_start, new_low, archived_to)


def _segment_records(
    archive: ArchiveStore, name: SegmentName, begin: int, stop: int
) -> Iterator[ArchivedMessage]:
    for record in decode_segment(archive.read(name.path()) or b""):
        if begin <= record.offset < stop:
            yield ArchivedMessage(record)


def archived_batches(
    archive: ArchiveStore,
    segments: Mapping[int, list[SegmentName]],
    start: Mapping[int, int],
    until: Mapping[int, int],
) -> Iterator[list[ArchivedMessage]]:
    """The archived records of ``[start, until)``, a segment's at a time, partition by
    partition in offset order."""
    for p in sorted(until):
        begin, stop = start.get(p, 0), until[p]
        for name in segments.get(p, []):
            if name.last < begin or name.first >= stop:
                continue
            batch = list(_segment_records(archive, name, begin, stop))
            if batch:
                yield batch


@dataclass(frozen=True)
class ArchiveFeed:
    """The archive in front of a range of the live topic: per partition, the archive
    feeds ``[next, upto)`` and the topic the rest."""

    archive: ArchiveStore
    segments: dict[int, list[SegmentName]]
    upto: dict[int, int]

    @classmethod
    def of(
        cls, archive: ArchiveStore, topic: str, start: Mapping[int, int], end: Mapping[int, int]
    ) -> ArchiveFeed:
        """The feed of the range ``[start, end)`` (a start already moved into the archive):
        a partition is fed from the archive where its first segment holds the start."""
        segments = archived_segments(archive, topic)
        upto = {
            p: max(start[p], min(names[-1].last + 1, end[p]))
            for p, names in segments.items()
            if p in end and names[0].first <= start[p]
        }
        return cls(archive, segments, upto)

    def archived(self, partition: int, at: int) -> bool:
        """Whether the archive feeds ``partition`` at offset ``at``."""
        return at < self.upto.get(partition, at)

    def records(self, partition: int, begin: int) -> Iterator[ArchivedMessage]:
        """The archived records of ``partition`` in ``[begin, upto)``, in offset order, a
        segment read when the one before is used up."""
        stop = self.upto.get(partition, begin)
        for name in self.segments.get(partition, []):
            if name.last >= begin and name.first < stop:
                yield from _segment_records(self.archive, name, begin, stop)

    def hand_over(
        self, at: Mapping[int, int], end: Mapping[int, int], live_low: Mapping[int, int]
    ) -> dict[int, int]:
        """Per partition, the offset at which the live topic takes over from a range now
        at ``at``: the archive's end, or ``at`` where the archive feeds it no more.
        ``ArchiveGap`` when, for a partition not done, that offset is below the topic's
        log start ``live_low``: the offsets between are in neither."""
        takes = {p: max(at[p], self.upto.get(p, at[p])) for p in end}
        gaps = [
            f"{p}: {takes[p]}-{live_low[p] - 1}"
            for p in sorted(end)
            if takes[p] < end[p] and takes[p] < live_low.get(p, 0)
        ]
        if gaps:
            raise ArchiveGap(
                "offsets in neither the archive nor the topic (its retention ran past the "
                f"archive's end), per partition: {', '.join(gaps)}"
            )
        return takes
