"""The archive read as the topic: ``verify --archive`` takes a range's start from the
archive's segments and its rest from the live topic.

``extend_into_archive`` moves a range that starts at the topic's log start back to the
archive's first offset (the archive is then the log's start) and says, per partition, up
to where the archive feeds it; ``archived_batches`` hands the archived records of a range
as records (``StoredRecord``), each with its original key, value, headers and timestamp.
Segments are read as they are: ``turnaudit archive check`` says whether they are intact.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from turnaudit.archive.segments import SEGMENT_FOLDER, SegmentName, decode_segment, partition_folder
from turnaudit.archive.store import LocalArchive
from turnaudit.records import StoredRecord


def archived_segments(archive: LocalArchive, topic: str) -> dict[int, list[SegmentName]]:
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
    that is earlier; the archive feeds it up to its last archived offset (within the range)."""
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
        archived_to[p] = min(last + 1, stop)
    return ArchivedRange(new_start, new_low, archived_to)


def archived_batches(
    archive: LocalArchive,
    segments: Mapping[int, list[SegmentName]],
    start: Mapping[int, int],
    until: Mapping[int, int],
) -> Iterator[list[StoredRecord]]:
    """The archived records of ``[start, until)``, a segment's at a time, partition by
    partition in offset order."""
    for p in sorted(until):
        begin, stop = start.get(p, 0), until[p]
        for name in segments.get(p, []):
            if name.last < begin or name.first >= stop:
                continue
            batch = [
                StoredRecord(r.topic, r.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
                for r in decode_segment(archive.read(name.path()) or b"")
                if begin <= r.offset < stop
            ]
            if batch:
                yield batch
