"""The archive read as the topic: a range from the log start reaches back to the archive's
first offset, and the archive and the live topic together feed every offset of the range
exactly once (where the archive reaches the live log start); where it does not, the
offsets between are fed by neither, so verify finds them lost."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support.archive import archive_records, signing_key
from turnaudit.archive.reading import archived_batches, archived_segments, extend_into_archive
from turnaudit.archive.segments import ArchivedRecord, SegmentName
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy

TOPIC = "t.turn-events"


@given(
    archived=st.integers(0, 50),  # the archive holds [0, archived)
    low=st.integers(0, 60),  # the live log starts here
    more=st.integers(0, 20),  # and ends here, past its start
)
def test_archive_and_topic_feed_each_offset_once_or_leave_the_gap_unfed(
    archived: int, low: int, more: int
) -> None:
    end = {0: low + more}
    segments = {0: [SegmentName(TOPIC, 0, 0, archived - 1)]} if archived else {}
    reach = extend_into_archive(segments, {0: low}, end, {0: low})
    fed = list(range(reach.start[0], reach.archived_to.get(0, reach.start[0])))
    fed += list(range(reach.live_start({0: low})[0], end[0]))
    assert len(fed) == len(set(fed))  # nothing twice
    if archived and low > 0:
        assert (reach.start[0], reach.low[0]) == (0, 0)  # the archive is the log's start
    expected_start = 0 if archived else low
    wanted = set(range(expected_start, end[0]))
    gap = set(range(archived, low))  # neither the archive nor the topic has these
    assert set(fed) == wanted - gap


def test_a_range_not_from_the_log_start_stays_where_it_was_asked() -> None:
    segments = {0: [SegmentName(TOPIC, 0, 0, 99)]}
    reach = extend_into_archive(segments, {0: 50}, {0: 200}, {0: 10})
    assert (reach.start[0], reach.low[0], reach.archived_to[0]) == (50, 10, 100)
    assert reach.live_start({0: 10}) == {0: 100}


def test_archived_batches_hand_the_records_of_the_range_as_stored(tmp_path: Path) -> None:
    records = [
        ArchivedRecord(TOPIC, p, o, 1000 * o, 1, b"k", b"v%d" % o, (("h", None),))
        for p in (0, 1)
        for o in range(10)
    ]
    archive = LocalArchive(tmp_path, durable=False)
    policy = ArchivePolicy(window_ms=3000)
    for p in (0, 1):
        archive_records(archive, [r for r in records if r.partition == p], signing_key(), policy)
    segments = archived_segments(archive, TOPIC)
    assert sorted(segments) == [0, 1]
    got = [
        r
        for batch in archived_batches(archive, segments, {0: 2, 1: 0}, {0: 7, 1: 3})
        for r in batch
    ]
    assert [(r.partition(), r.offset()) for r in got] == [(0, o) for o in range(2, 7)] + [
        (1, o) for o in range(3)
    ]
    assert (got[0].key(), got[0].value(), got[0].headers(), got[0].timestamp()) == (
        b"k",
        b"v2",
        [("h", None)],
        (1, 2000),
    )
