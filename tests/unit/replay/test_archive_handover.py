"""``replay --archive``: the archive in front of the topic hands the reader the same records,
in the same block order, as the whole topic would have, wherever the archive ends and the
topic's retained log starts (as long as they meet), resumed from any checkpoint too; where
they do not meet, the replay is refused before anything is read (``ArchiveGap``)."""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.archive import archive_records, header_pairs, signing_key
from turnaudit.archive.reading import (
    ArchiveFeed,
    ArchiveGap,
    archived_segments,
    extend_into_archive,
)
from turnaudit.archive.segments import ArchivedRecord, SegmentName
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.time_range import plan_archived
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.kafka.offsets import BrokerAnswers, RangeSpec, Watermarks
from turnaudit.records import Record, StoredRecord, record_headers
from turnaudit.replay import order
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.replay.reader import OrderedReader
from turnaudit.settings import KafkaSettings

TOPIC = "t.turn-events"
Seen = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int, int]


@dataclass(frozen=True)
class Log:
    """A partition's records (offsets may skip, as after transaction markers); the archive
    holds the first ``archived`` of them, the topic keeps the offsets from ``retained``."""

    records: list[ArchivedRecord]
    archived: int
    retained: int

    @property
    def start(self) -> int:
        return self.records[0].offset

    @property
    def end(self) -> int:
        return self.records[-1].offset + 1

    @property
    def archive_end(self) -> int:
        """The first offset the archive does not hold (its start when it holds none)."""
        return self.records[self.archived - 1].offset + 1 if self.archived else self.start


@st.composite
def logs(draw: st.DrawFn, meeting: bool = True) -> dict[int, Log]:
    """Up to three partitions; each archived up to a point and retained by the topic from a
    point; ``meeting``: the topic's log start is at or before the archive's end."""
    found = {}
    for p in draw(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)):
        offset, clock, records = draw(st.integers(0, 50)), 1_700_000_000_000, []
        for _ in range(draw(st.integers(1, 40))):
            clock += draw(st.integers(0, 1500))
            key, value = draw(st.none() | st.binary(max_size=6)), draw(st.binary(max_size=12))
            records.append(
                ArchivedRecord(TOPIC, p, offset, clock, 1, key, value, draw(header_pairs()))
            )
            offset += draw(st.sampled_from((1, 1, 1, 2)))
        archived = draw(st.integers(0, len(records)))
        log = Log(records, archived, 0)
        if meeting:  # anywhere from the log's start to just after the archive's last offset
            retained = draw(st.integers(log.start, log.archive_end))
        else:
            retained = draw(st.integers(log.archive_end + 1, log.end + 3))
        found[p] = Log(records, archived, retained)
    return found


@dataclass
class FakeTopic:
    """Serves the assigned partitions' retained records in random chunks and partition
    order, sometimes again (a refetch); keeps a pause across an assignment, as librdkafka
    may. Reading below a partition's retained start is a failure of the reader."""

    logs: Mapping[int, Log]
    rnd: random.Random
    retained: bool  # False: the whole log, as before any deletion
    position: dict[int, int] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    closed: bool = False

    def _log(self, p: int) -> list[ArchivedRecord]:
        low = self.logs[p].retained if self.retained else 0
        return [r for r in self.logs[p].records if r.offset >= low]

    def assign(self, starts: Mapping[int, int]) -> None:
        self.position = {}
        for p, offset in starts.items():
            if self.retained:
                assert offset >= self.logs[p].retained, f"read {p} below its log start"
            log = self._log(p)
            self.position[p] = next((i for i, r in enumerate(log) if r.offset >= offset), len(log))

    def consume(self, max_records: int, timeout: float) -> list[Record]:
        got: list[Record] = []
        serving = [p for p in self.position if p not in self.paused]
        for p in self.rnd.sample(serving, k=self.rnd.randint(0, len(serving))):
            log, at = self._log(p), self.position[p]
            if at > 0 and self.rnd.random() < 0.2:
                at = self.rnd.randint(max(0, at - 3), at)
            step = self.rnd.randint(1, 9)
            got += [as_topic_record(r) for r in log[at : at + step]]
            self.position[p] = max(self.position[p], min(at + step, len(log)))
        return got

    def pause(self, partitions: list[int]) -> None:
        self.paused.update(partitions)

    def resume(self, partitions: list[int]) -> None:
        self.paused.difference_update(partitions)

    def close(self) -> None:
        self.closed = True


def as_topic_record(r: ArchivedRecord) -> StoredRecord:
    return StoredRecord(r.topic, r.partition, r.offset, r.key, r.value, r.headers, r.timestamp)


def seen(record: Record) -> Seen:
    kind, when = record.timestamp()
    headers = tuple(record_headers(record))
    return (
        record.partition() or 0,
        record.offset() or 0,
        record.key(),
        record.value(),
        headers,
        kind,
        when,
    )


def replay_state(start: Mapping[int, int], end: Mapping[int, int]) -> ReplayCheckpoint:
    return ReplayCheckpoint("f" * 64, TOPIC, dict(start), dict(end), dict(start), 0, 0, 0)


def read(
    state: ReplayCheckpoint,
    topic: FakeTopic,
    feed: ArchiveFeed | None,
    *,
    stop_after: int | None = None,
) -> list[Seen]:
    """What the replay's reader hands the output (``stop_after`` batches, or all)."""
    reader = OrderedReader(KafkaSettings(), state, timeout=1.0, archive=feed, connect=lambda: topic)
    out: list[Seen] = []
    for n, batch in enumerate(reader.batches(topic.rnd.choice([1, 4, 50])), 1):
        out += [seen(r) for r in batch]
        if n == stop_after:
            break
    return out


def archive_of(root: Path, found: Mapping[int, Log]) -> LocalArchive:
    archive = LocalArchive(root, durable=False)
    policy = ArchivePolicy(window_ms=4000)  # a segment per few seconds of record time
    for log in found.values():
        if log.archived:
            archive_records(archive, log.records[: log.archived], signing_key(), policy)
    return archive


def archive_range(archive: LocalArchive, found: Mapping[int, Log]) -> ReplayCheckpoint:
    """The range ``replay --archive`` resolves after the deletion: from the topic's log
    start (moved into the archive), to the end."""
    low = {p: log.retained for p, log in found.items()}
    end = {p: log.end for p, log in found.items()}
    start = extend_into_archive(archived_segments(archive, TOPIC), low, end, low).start
    return replay_state(start, end)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(
    logs(),
    st.randoms(use_true_random=False),
    st.integers(1, 4),
    st.integers(1, 12),
    st.integers(1, 5),
)
def test_any_split_between_archive_and_topic_replays_as_the_whole_topic(
    found: dict[int, Log], rnd: random.Random, block: int, budget: int, floor: int
) -> None:
    # Small blocks and buffers: partitions take turns often and the topic's get paused.
    with (
        mock.patch.object(order, "BLOCK_MESSAGES", block),
        mock.patch.object(order, "_BUFFER_BUDGET", budget),
        mock.patch.object(order, "_BUFFER_FLOOR", floor),
    ):
        split_replays_as_whole(found, rnd)


def split_replays_as_whole(found: dict[int, Log], rnd: random.Random) -> None:
    whole = read(
        replay_state({p: 0 for p in found}, {p: log.end for p, log in found.items()}),
        FakeTopic(found, rnd, retained=False),
        None,
    )
    with tempfile.TemporaryDirectory() as root:
        archive = archive_of(Path(root), found)
        state = archive_range(archive, found)
        feed = ArchiveFeed.of(archive, TOPIC, state.start, state.end)
        feed.hand_over(state.next, state.end, {p: log.retained for p, log in found.items()})
        topic = FakeTopic(found, rnd, retained=True)
        assert read(state, topic, feed) == whole
        assert topic.closed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(logs(), st.randoms(use_true_random=False), st.integers(1, 6))
def test_a_replay_from_the_archive_resumed_at_any_batch_goes_on_where_it_stopped(
    found: dict[int, Log], rnd: random.Random, batches: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        archive = archive_of(Path(root), found)
        state = archive_range(archive, found)
        low = {p: log.retained for p, log in found.items()}

        def run(at: ReplayCheckpoint, stop_after: int | None = None) -> list[Seen]:
            feed = ArchiveFeed.of(archive, TOPIC, at.start, at.end)  # built again on resume
            feed.hand_over(at.next, at.end, low)
            return read(at, FakeTopic(found, rnd, retained=True), feed, stop_after=stop_after)

        whole = run(archive_range(archive, found))
        head = run(state, stop_after=batches)
        saved = ReplayCheckpoint.from_json(json.loads(json.dumps(state.as_json())))
        assert head + run(saved) == whole


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(logs(meeting=False))
def test_a_topic_retained_past_the_archive_end_is_refused_naming_the_offsets(
    found: dict[int, Log],
) -> None:
    with tempfile.TemporaryDirectory() as root:
        archive = archive_of(Path(root), found)
        state = archive_range(archive, found)
        feed = ArchiveFeed.of(archive, TOPIC, state.start, state.end)
        low = {p: log.retained for p, log in found.items()}
        missing = {
            p: (log.archive_end, low[p] - 1)
            for p, log in sorted(found.items())
            # The range starts in the archive and still needs offsets past its end (a
            # partition the archive holds nothing of starts at the topic's log start).
            if log.archived and log.archive_end < log.end
        }
        if not missing:
            takes = feed.hand_over(state.next, state.end, low)
            assert all(takes[p] >= min(low[p], state.end[p]) for p in found)
            return
        with pytest.raises(ArchiveGap) as refused:
            feed.hand_over(state.next, state.end, low)
        for p, (first, last) in missing.items():
            assert f"{p}: {first}-{last}" in str(refused.value)


def test_an_archive_that_begins_after_the_range_start_feeds_none_of_it() -> None:
    segments = {0: [SegmentName(TOPIC, 0, 500, 900)]}
    reach = extend_into_archive(segments, {0: 0}, {0: 1000}, {0: 0})
    # The topic holds 0..999: reading 500..900 from the archive would skip 0..499.
    assert (reach.start, reach.archived_to) == ({0: 0}, {})
    assert reach.live_start({0: 0}) == {0: 0}


# (archive's first offset or None, log start, --from-offsets entry or None) -> where it starts.
STARTS = [
    ((0, 500, None), 0),  # from the log start: the archive's first offset
    ((0, 500, 300), 300),  # an offset of its own in the archive: there
    ((0, 500, 500), 500),  # an offset of its own at the log start: there, not moved back
    ((0, 500, 700), 700),  # on the topic: there
    ((200, 500, 100), 200),  # before the archive: its first offset
    ((600, 500, 100), 500),  # an archive that begins after the log start: the log start
    ((None, 500, 100), 500),  # no archive of the partition: the log start, as on the topic
]


@pytest.mark.parametrize(("case", "starts_at"), STARTS)
def test_a_replay_from_the_archive_starts_where_asked_within_what_is_held(
    case: tuple[int | None, int, int | None], starts_at: int
) -> None:
    first, low, asked = case
    segments = {} if first is None else {0: [SegmentName(TOPIC, 0, first, 899)]}
    spec = RangeSpec(from_offsets=None if asked is None else {0: asked})
    answers = BrokerAnswers(Watermarks({0: low}, {0: 1000}), None, None)
    # No time is asked: no segment is read (the archive is empty).
    got = plan_archived(TOPIC, spec, answers, LocalArchive(Path("/nonexistent")), segments)
    assert got.range.start == {0: starts_at}
