"""A range of a topic with the archive in front of it, times included: "the offset of time
T" where the topic's retention has removed the records around T, for ``replay --archive``,
``eval rebuild --archive`` and ``verify --archive`` alike.

The rule is offsets_for_times' (the first offset whose record's timestamp is at or after
T), asked of the topic and the archive together, then planned by ``plan_range`` as a topic
range is, with the archive's first offset as the log start where that is earlier. Per
partition the answer is the earlier of the broker's (the topic's end when it has none) and
the archive's: its first record at or after T among the segments that begin before the
topic's log start. The archive is searched without reading it whole: its last segment
says whether any record is at or after T; if one is, a binary search over the segments'
first timestamps and a scan of one segment find the first. A lookup reads at most
``log2(segments + 1) + 2`` segments.

The search assumes a partition's timestamps do not go back as offsets go on: log append
time (the broker's clock) gives that. With create time out of order, an answer is still a
record at or after T (or the end), so never an earlier offset than the whole untrimmed
topic's, but it may be a later one: a record at or after T in a segment before the one
the search lands on is not looked for (that would read every segment before it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice

from turnaudit.archive.reading import archived_segments
from turnaudit.archive.segments import ArchivedRecord, SegmentName, decode_segment
from turnaudit.archive.store import ArchiveStore
from turnaudit.errors import BrokerError
from turnaudit.events import occurred_millis
from turnaudit.kafka.offsets import (
    BrokerAnswers,
    RangeSpec,
    ResolvedRange,
    Watermarks,
    at_or_end,
    broker_answers,
    plan_range,
)
from turnaudit.settings import KafkaSettings

# Where the archive's first record at or after a time is, per partition (None: none is).
ArchiveLookup = Callable[[int, int], int | None]


@dataclass
class SegmentTimes:
    """One partition's segments, each read when a lookup needs it. ``reads`` counts the
    segments fetched (a lookup's cost)."""

    archive: ArchiveStore
    names: list[SegmentName]
    reads: int = 0
    _first: dict[int, ArchivedRecord] = field(default_factory=dict)

    def _read(self, index: int) -> Iterator[ArchivedRecord]:
        self.reads += 1
        return decode_segment(self.archive.read(self.names[index].path()) or b"")

    def first(self, index: int) -> ArchivedRecord:
        """The first record of segment ``index`` (the rest of it not decoded)."""
        if index not in self._first:
            self._first[index] = self._checked(index, lambda: list(islice(self._read(index), 1)))[0]
        return self._first[index]

    def records(self, index: int) -> list[ArchivedRecord]:
        """Every record of segment ``index``, in offset order."""
        return self._checked(index, lambda: list(self._read(index)))

    def _checked(
        self, index: int, decode: Callable[[], list[ArchivedRecord]]
    ) -> list[ArchivedRecord]:
        try:
            found = decode()
        except ValueError:
            found = []
        if not found:
            raise BrokerError(
                f"the archive's segment {self.names[index].path()} is missing, empty or "
                "unreadable: run turnaudit archive check"
            )
        return found


def first_at_or_after(times: SegmentTimes, millis: int) -> int | None:
    """The offset of the first archived record whose timestamp is ``millis`` or later (None:
    the last segment ends before ``millis``): the first segment whose first record is at or
    after ``millis``, found by binary search, unless the segment before it holds such a
    record further in."""
    count = len(times.names)
    if count == 0 or times.records(count - 1)[-1].timestamp < millis:
        return None
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if times.first(middle).timestamp >= millis:
            high = middle
        else:
            low = middle + 1
    if low > 0:
        for record in times.records(low - 1):
            if record.timestamp >= millis:
                return record.offset
    return times.first(low).offset if low < count else None


def with_archive_answers(
    found: Mapping[int, int] | None, marks: Watermarks, lookup: ArchiveLookup, millis: int
) -> dict[int, int] | None:
    """offsets_for_times' answers (``found``, per partition; none: the partition's end)
    with the archive in front: the archive's first record at or after the time where that
    is earlier."""
    if found is None:
        return None
    answers = at_or_end(found, marks.high)
    for p, answer in answers.items():
        archived = lookup(p, millis)
        if archived is not None and archived < answer:
            answers[p] = archived
    return answers


def plan_with_archive(
    topic: str,
    spec: RangeSpec,
    answers: BrokerAnswers,
    first_archived: Mapping[int, int],
    lookup: ArchiveLookup,
) -> ResolvedRange:
    """``plan_range`` of the topic with the archive in front: the log start is the
    archive's first offset (``first_archived``) where that is earlier, and the times are
    answered by the topic and the archive together (``with_archive_answers``). So a range
    from the log start starts in the archive, and an offset asked below the topic's log
    start (``--from-offsets``) is kept where the archive holds it."""
    marks = answers.marks
    low = {p: min(start, first_archived.get(p, start)) for p, start in marks.low.items()}
    since = until = None
    if spec.since is not None:
        since = with_archive_answers(answers.since, marks, lookup, _millis(spec.since))
    if spec.until is not None:
        until = with_archive_answers(answers.until, marks, lookup, _millis(spec.until))
    return plan_range(topic, spec, Watermarks(low, marks.high), since=since, until=until)


def _millis(moment: datetime) -> int:
    return occurred_millis(moment)


@dataclass(frozen=True)
class ArchivedTopicRange:
    """A range resolved with the archive in front: ``range`` (its ``log_start`` the
    archive's first offset where that is earlier), the topic's own log start now
    (``live_low``) and the archive's segments of the topic."""

    range: ResolvedRange
    live_low: dict[int, int]
    segments: dict[int, list[SegmentName]]
    times: dict[int, SegmentTimes]

    @property
    def segments_read(self) -> int:
        """Segments read to answer the range's times."""
        return sum(t.reads for t in self.times.values())


def resolve_with_archive(
    settings: KafkaSettings,
    topic: str,
    spec: RangeSpec,
    archive: ArchiveStore,
    timeout: float = 10.0,
) -> ArchivedTopicRange:
    """The offsets of ``spec`` on ``topic`` now, with ``archive`` in front of its log start
    (the module doc)."""
    answers = broker_answers(settings, topic, spec, timeout)
    segments = archived_segments(archive, topic)
    return plan_archived(topic, spec, answers, archive, segments)


def plan_archived(
    topic: str,
    spec: RangeSpec,
    answers: BrokerAnswers,
    archive: ArchiveStore,
    segments: dict[int, list[SegmentName]],
) -> ArchivedTopicRange:
    """``resolve_with_archive`` given the broker's answers: the archive's segments read
    only as the times' lookups need them."""
    live_low = dict(answers.marks.low)
    times = {
        p: SegmentTimes(archive, [n for n in names if n.first < live_low[p]])
        for p, names in segments.items()
        if p in live_low
    }

    def lookup(partition: int, millis: int) -> int | None:
        found = times.get(partition)
        return None if found is None or not found.names else first_at_or_after(found, millis)

    first = {p: names[0].first for p, names in segments.items() if names}
    resolved = plan_with_archive(topic, spec, answers, first, lookup)
    return ArchivedTopicRange(resolved, live_low, segments, times)
