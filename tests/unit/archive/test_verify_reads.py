"""What ``verify --archive`` reads whole (the checkpoints, the stream heads) with the
archive in front of the topic, the topic faked (its log start and end, its records):
whatever the topic's retention removed and whatever the archive holds, every offset either
holds is read once, in offset order per partition, the archive's copy where both hold it;
the log start counts as moved only when neither holds offset 0; a topic gone from the
broker is read from the archive alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.archive import archive_records, signing_key
from turnaudit.archive.reading import ArchivedMessage
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import RangeSpec, ResolvedRange
from turnaudit.records import Record
from turnaudit.settings import KafkaSettings
from turnaudit.verify import kafka_reads
from turnaudit.verify.kafka_reads import whole_topic

TOPIC = "t.checkpoints"

# Per partition: (records it ever had, the topic's log start, how many the archive holds).
Drawn = tuple[int, int, int]


class FakeTopic:
    """A topic's records past its log start, read as the broker hands them."""

    def __init__(
        self,
        records: Sequence[ArchivedRecord],
        low: Mapping[int, int],
        high: Mapping[int, int],
    ) -> None:
        self.records = records
        self.low, self.high = dict(low), dict(high)
        self.reads: list[tuple[int, int]] = []

    def resolve(self, _settings: KafkaSettings, topic: str, _spec: RangeSpec) -> ResolvedRange:
        assert topic == TOPIC
        return ResolvedRange(dict(self.low), dict(self.high), dict(self.low))

    def batches(
        self,
        _settings: KafkaSettings,
        topic: str,
        start: Mapping[int, int] | None,
        end: Mapping[int, int],
        **_options: object,
    ) -> Iterator[Sequence[Record]]:
        assert topic == TOPIC
        assert start is not None
        for p in sorted(end):
            assert start[p] >= self.low[p], "read below the log start"
            held = [
                ArchivedMessage(r)
                for r in self.records
                if r.partition == p and start[p] <= r.offset < end[p]
            ]
            self.reads += [(p, m.stored.offset) for m in held]
            if held:
                yield held

    def messages(
        self,
        settings: KafkaSettings,
        topic: str,
        start: Mapping[int, int] | None,
        end: Mapping[int, int],
        **options: object,
    ) -> Iterator[Record]:
        for batch in self.batches(settings, topic, start, end, **options):
            yield from batch


def record(p: int, offset: int, copy: str) -> ArchivedRecord:
    return ArchivedRecord(TOPIC, p, offset, 1_700_000_000_000 + offset, 2, None, copy.encode())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.dictionaries(
        st.integers(0, 2),
        st.integers(1, 12).flatmap(
            lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(0, n))
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_topic_read_whole_holds_every_offset_the_archive_or_the_topic_holds_once(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    drawn: dict[int, Drawn],
) -> None:
    archive = LocalArchive(tmp_path_factory.mktemp("verify-reads"), durable=False)
    live, low, want = [], {}, []
    for p, (count, log_start, archived) in drawn.items():
        low[p] = log_start  # the high watermark: count
        live += [record(p, o, "topic") for o in range(log_start, count)]
        if archived:
            archive_records(
                archive,
                [record(p, o, "archive") for o in range(archived)],
                signing_key(),
                ArchivePolicy(window_ms=4),
            )
        # The archive's copy up to its end, the topic's past it; offsets neither holds
        # (retention ran past the archive's end) are not there.
        want += [(p, o, "archive" if o < archived else "topic") for o in range(archived)]
        want += [(p, o, "topic") for o in range(max(archived, log_start), count)]
    topic = FakeTopic(live, low, {p: count for p, (count, _, _) in drawn.items()})
    monkeypatch.setattr(kafka_reads, "resolve_range", topic.resolve)
    monkeypatch.setattr(kafka_reads, "read_range_batches", topic.batches)
    monkeypatch.setattr(kafka_reads, "read_range", topic.messages)

    read = whole_topic(KafkaSettings(), TOPIC, archive, timeout=1.0)
    assert read is not None
    got = [(m.partition(), m.offset(), (m.value() or b"").decode()) for m in read.records]
    # Each partition in offset order (partitions may interleave: the archive's go first).
    assert sorted(got, key=lambda g: g[0]) == sorted(want)
    # The topic is asked only for what the archive does not hold.
    assert all(offset >= drawn[p][2] for p, offset in topic.reads)
    starts = {p: 0 if archived else log_start for p, (_, log_start, archived) in drawn.items()}
    assert read.log_start_moved == any(s > 0 for s in starts.values())

    # Without the archive: the topic alone, its log start as it is.
    topic.reads.clear()
    alone = whole_topic(KafkaSettings(), TOPIC, None, timeout=1.0)
    assert alone is not None
    assert [(m.partition(), m.offset()) for m in alone.records] == sorted(
        (r.partition, r.offset) for r in live
    )
    assert alone.log_start_moved == any(s > 0 for s in low.values())


def test_a_topic_gone_from_the_broker_is_read_from_the_archive_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_topic(*_args: object, **_options: object) -> ResolvedRange:
        raise BrokerError(f"{TOPIC}: no such topic")

    monkeypatch.setattr(kafka_reads, "resolve_range", no_topic)
    archive = LocalArchive(tmp_path, durable=False)
    assert whole_topic(KafkaSettings(), TOPIC, archive, timeout=1.0) is None
    held = [record(0, o, "archive") for o in range(3, 9)]
    archive_records(archive, held, signing_key(), ArchivePolicy(window_ms=2))
    read = whole_topic(KafkaSettings(), TOPIC, archive, timeout=1.0)
    assert read is not None
    assert [m.offset() for m in read.records] == list(range(3, 9))
    assert read.log_start_moved  # the archive begins at 3: what was before is gone
    assert whole_topic(KafkaSettings(), TOPIC, None, timeout=1.0) is None
