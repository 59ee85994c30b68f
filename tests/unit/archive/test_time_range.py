"""A range by broker time with the archive in front of a trimmed topic resolves to the
offsets the whole untrimmed topic gives (``turnaudit.archive.time_range``).

The broker is a model of offsets_for_times (the first record at or after the time among
those the topic holds, -1 when none is), the archive real segments in a store that counts
its reads. For any timestamps that do not go back (log append time), any log start and
any archive reaching it, any times and offsets asked: the same start and end per
partition, and no lookup reads more than ``log2(segments + 1) + 2`` segments. With
timestamps out of order (create time), an answer is never before the untrimmed one and
is a record at or after the time, or the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.archive.segments import ArchivedRecord, SegmentName, encode_segment
from turnaudit.archive.time_range import (
    SegmentTimes,
    first_at_or_after,
    plan_archived,
)
from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import (
    NO_OFFSET,
    BrokerAnswers,
    RangeSpec,
    ResolvedRange,
    Watermarks,
    plan_range,
)

TOPIC = "t.turn-events"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH_MS = int(EPOCH.timestamp() * 1000)


@dataclass
class CountingArchive:
    """An archive in memory."""

    stored: dict[str, bytes] = field(default_factory=dict)

    def write_once(self, name: str, data: bytes) -> bool:
        self.stored[name] = data
        return True

    def read(self, name: str) -> bytes | None:
        return self.stored.get(name)

    def files(self, folder: str = "") -> list[str]:
        return sorted(n for n in self.stored if n.startswith(folder))

    def folders(self, folder: str = "") -> list[str]:
        return []

    def clear_partials(self, older_than_s: float, now: float) -> int:
        return 0


@dataclass(frozen=True)
class Partition:
    """One partition's records as (offset, timestamp ms), offsets ascending."""

    records: tuple[tuple[int, int], ...]
    high: int

    def answer(self, low: int, millis: int) -> int:
        """offsets_for_times on the topic holding ``[low, high)``."""
        return next((o for o, t in self.records if o >= low and t >= millis), NO_OFFSET)


@st.composite
def partitions(draw: st.DrawFn, *, ordered: bool) -> Partition:
    count = draw(st.integers(1, 40))
    offset, clock, records = 0, EPOCH_MS, []
    for _ in range(count):
        records.append((offset, clock))
        offset += draw(st.integers(1, 3))  # offsets no record holds: transaction markers
        step = draw(st.integers(0, 5000) if ordered else st.integers(-5000, 5000))
        clock += step
    return Partition(tuple(records), offset - draw(st.integers(0, 2)) + 2)


@st.composite
def cases(
    draw: st.DrawFn, *, ordered: bool
) -> tuple[dict[int, Partition], dict[int, int], dict[int, list[list[tuple[int, int]]]]]:
    """Partitions, each one's log start after trimming, and the archive's segments: every
    record before the log start and some after, cut into segments of any sizes."""
    parts = {p: draw(partitions(ordered=ordered)) for p in range(draw(st.integers(1, 3)))}
    low: dict[int, int] = {}
    segments: dict[int, list[list[tuple[int, int]]]] = {}
    for p, part in parts.items():
        low[p] = draw(st.integers(0, part.high))
        before = sum(1 for o, _ in part.records if o < low[p])
        held = draw(st.integers(before, len(part.records)))
        archived = list(part.records[:held])
        cuts: list[list[tuple[int, int]]] = []
        while archived:
            size = draw(st.integers(1, max(1, len(archived))))
            cuts.append(archived[:size])
            archived = archived[size:]
        segments[p] = cuts
    return parts, low, segments


def moments() -> st.SearchStrategy[datetime | None]:
    return st.none() | st.integers(-1000, 250_000).map(
        lambda ms: EPOCH + timedelta(milliseconds=ms)
    )


def offsets_asked() -> st.SearchStrategy[dict[int, int] | None]:
    return st.none() | st.dictionaries(st.integers(0, 2), st.integers(0, 130), max_size=3)


def build_archive(
    segments: dict[int, list[list[tuple[int, int]]]],
) -> tuple[CountingArchive, dict[int, list[SegmentName]]]:
    archive = CountingArchive()
    names: dict[int, list[SegmentName]] = {}
    for p, cuts in segments.items():
        for cut in cuts:
            name = SegmentName(TOPIC, p, cut[0][0], cut[-1][0])
            records = [ArchivedRecord(TOPIC, p, o, t, 2, None, b"v", ()) for o, t in cut]
            archive.write_once(name.path(), encode_segment(records, codec="null"))
            names.setdefault(p, []).append(name)
    return archive, names


def answers_of(parts: dict[int, Partition], low: dict[int, int], spec: RangeSpec) -> BrokerAnswers:
    def at(moment: datetime | None) -> dict[int, int] | None:
        if moment is None:
            return None
        millis = int(moment.timestamp() * 1000)
        return {p: part.answer(low[p], millis) for p, part in parts.items()}

    high = {p: part.high for p, part in parts.items()}
    return BrokerAnswers(Watermarks(dict(low), high), at(spec.since), at(spec.until))


def untrimmed(parts: dict[int, Partition], spec: RangeSpec) -> ResolvedRange:
    answers = answers_of(parts, {p: 0 for p in parts}, spec)
    return plan_range(TOPIC, spec, answers.marks, since=answers.since, until=answers.until)


def known(spec: RangeSpec, parts: dict[int, Partition]) -> RangeSpec:
    """The spec with offsets only for partitions the topic has."""

    def keep(found: dict[int, int] | None) -> dict[int, int] | None:
        return None if found is None else {p: o for p, o in found.items() if p in parts}

    return RangeSpec(
        spec.since,
        spec.until,
        keep(dict(spec.from_offsets or {})),
        keep(dict(spec.to_offsets or {})),
    )


@settings(max_examples=300, deadline=None)
@given(
    case=cases(ordered=True),
    since=moments(),
    until=moments(),
    from_offsets=offsets_asked(),
    to_offsets=offsets_asked(),
)
def test_times_and_offsets_resolve_as_on_the_untrimmed_topic_reading_few_segments(
    case: tuple[dict[int, Partition], dict[int, int], dict[int, list[list[tuple[int, int]]]]],
    since: datetime | None,
    until: datetime | None,
    from_offsets: dict[int, int] | None,
    to_offsets: dict[int, int] | None,
) -> None:
    parts, low, segments = case
    spec = known(RangeSpec(since, until, from_offsets, to_offsets), parts)
    archive, names = build_archive(segments)
    found = plan_archived(TOPIC, spec, answers_of(parts, low, spec), archive, names)
    whole = untrimmed(parts, spec)
    assert (found.range.start, found.range.end) == (whole.start, whole.end)
    assert found.live_low == low
    lookups = (since is not None) + (until is not None)
    for times in found.times.values():
        bound = math.ceil(math.log2(len(times.names) + 1)) + 2
        assert times.reads <= lookups * bound


@settings(max_examples=300, deadline=None)
@given(case=cases(ordered=False), since=moments(), until=moments())
def test_out_of_order_times_answer_a_record_at_or_after_the_time_never_an_earlier_offset(
    case: tuple[dict[int, Partition], dict[int, int], dict[int, list[list[tuple[int, int]]]]],
    since: datetime | None,
    until: datetime | None,
) -> None:
    parts, low, segments = case
    spec = RangeSpec(since, until)
    archive, names = build_archive(segments)
    found = plan_archived(TOPIC, spec, answers_of(parts, low, spec), archive, names).range
    whole = untrimmed(parts, spec)
    for p, part in parts.items():
        stamps = dict(part.records)
        start, end = found.start[p], found.end[p]
        assert start >= whole.start[p]
        assert end >= whole.end[p]
        if since is not None and start < part.high:
            assert stamps[start] >= millis_of(since)
        if until is not None and start < end < part.high:
            assert stamps[end] >= millis_of(until)


def millis_of(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@given(case=cases(ordered=True), at=st.integers(-1000, 250_000))
def test_the_search_finds_the_first_archived_record_at_or_after_the_time(
    case: tuple[dict[int, Partition], dict[int, int], dict[int, list[list[tuple[int, int]]]]],
    at: int,
) -> None:
    _, _, segments = case
    archive, names = build_archive(segments)
    for p, cuts in segments.items():
        held = [r for cut in cuts for r in cut]
        millis = EPOCH_MS + at
        expected = next((o for o, t in held if t >= millis), None)
        assert first_at_or_after(SegmentTimes(archive, names.get(p, [])), millis) == expected


def test_a_missing_segment_is_one_line_naming_it_and_archive_check() -> None:
    archive, names = build_archive({0: [[(0, EPOCH_MS)], [(1, EPOCH_MS + 10)]]})
    del archive.stored[names[0][1].path()]
    with pytest.raises(BrokerError, match=r"00000000000000000001\.avro.*archive check"):
        first_at_or_after(SegmentTimes(archive, names[0]), EPOCH_MS + 5)
