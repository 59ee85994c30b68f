"""``replay --archive --group``'s archive part of a member (``ArchivePart``): for any split
of a partition between archive and topic and any point the topic's records arrive at, a
member taking the archive's records and then the consumer's (through ``keep_live`` and
``hand_over``, as ``GroupMember.take`` does) takes every offset of the range once, in
order; a consumer that cannot seek yet is asked again; segments that end before their
names fail with one line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.archive import archive_records, signing_key
from turnaudit.archive.reading import ArchiveFeed
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.errors import BrokerError
from turnaudit.records import Record, StoredRecord
from turnaudit.replay.group_archive import ArchivePart

TOPIC = "t.turn-events"


@dataclass
class TopicConsumer:
    """One partition of a topic holding ``[low, end)``: fetches from its position unless
    paused; a seek refused ``refuse_seeks`` times (a partition not fetching yet)."""

    low: int
    end: int
    position: int
    refuse_seeks: int = 0
    paused: bool = False
    calls: list[str] = field(default_factory=list)

    def pause(self, partitions: list[int]) -> None:
        self.paused, _ = True, self.calls.append("pause")

    def resume(self, partitions: list[int]) -> None:
        self.paused, _ = False, self.calls.append("resume")

    def seek_each(self, offsets: Mapping[int, int]) -> bool:
        if self.refuse_seeks:
            self.refuse_seeks -= 1
            return False
        self.position = max(offsets[0], self.low)
        return True

    def fetch(self, count: int) -> list[Record]:
        if self.paused:
            return []
        got = range(max(self.position, self.low), min(self.position + count, self.end))
        self.position = min(self.position + count, self.end)
        return [StoredRecord(TOPIC, 0, o, None, f"{o}".encode()) for o in got]


def archive_of(root: Path, last: int) -> ArchiveFeed:
    records = [
        ArchivedRecord(TOPIC, 0, o, 1_700_000_000_000 + o * 50, 1, None, f"{o}".encode())
        for o in range(last + 1)
    ]
    archive_records(LocalArchive(root), records, signing_key(), ArchivePolicy(window_ms=400))
    return ArchiveFeed.of(LocalArchive(root), TOPIC, {0: 0}, {0: 10_000})


@dataclass(frozen=True)
class Split:
    """The archive's last offset, how far before it the topic's log start is, the topic's
    records past it, the batch size, the member's start, seeks refused, and whether the
    consumer fetches before the archive is read."""

    last: int
    low_back: int
    extra: int
    batch: int
    start: int
    refuse: int
    fetch_first: bool


SPLITS = st.builds(
    Split,
    st.integers(0, 60),
    st.integers(0, 60),
    st.integers(0, 40),
    st.integers(1, 25),
    st.integers(0, 30),
    st.integers(0, 3),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(split=SPLITS)
def test_a_member_takes_every_offset_once_in_order_from_the_archive_then_the_topic(
    tmp_path_factory: pytest.TempPathFactory, split: Split
) -> None:
    last, batch, fetch_first = split.last, split.batch, split.fetch_first
    feed = archive_of(tmp_path_factory.mktemp("archive"), last)
    low = max(0, last + 1 - split.low_back)  # the topic meets the archive
    end, start = last + 1 + split.extra, min(split.start, last)
    part = ArchivePart(feed, TOPIC)
    consumer = TopicConsumer(low, end, part.consumer_start(0, start), refuse_seeks=split.refuse)
    next_at, taken = {0: start}, []

    def take(records: list[Record], *, live: bool) -> None:
        for record in records:
            offset = record.offset()
            assert offset is not None
            if live and not part.keep_live(0, next_at[0], consumer):
                continue
            if next_at[0] <= offset < end:
                taken.append(offset)
                next_at[0] = offset + 1

    for _ in range(1000):
        if next_at[0] >= end:
            break
        if fetch_first:  # the consumer fetches before the archive is read
            take(consumer.fetch(batch), live=True)
        archived = part.read(next_at, batch)
        take(archived, live=False)
        if not archived:
            part.hand_over(next_at, {0: end}, consumer)
        take(consumer.fetch(batch), live=True)
    assert taken == list(range(start, end))
    if fetch_first and split.extra > 0:
        assert "pause" in consumer.calls  # records fetched while archived were dropped


def test_segments_ending_before_their_names_fail_with_one_line(tmp_path: Path) -> None:
    feed = archive_of(tmp_path, 30)
    lying = ArchiveFeed(feed.archive, feed.segments, {0: feed.upto[0] + 5})
    part = ArchivePart(lying, TOPIC)
    with pytest.raises(BrokerError, match=r"end at offset 30, their names at 35.*archive check"):
        read_all(part)


def read_all(part: ArchivePart) -> None:
    next_at = {0: 0}
    for _ in range(100):
        for record in part.read(next_at, 10):
            offset = record.offset()
            assert offset is not None
            next_at[0] = offset + 1
