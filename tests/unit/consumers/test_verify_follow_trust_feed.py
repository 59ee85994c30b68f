"""The follower's checkpoint reader (``TrustFeed``), without a broker: the reader's
own steps (``begin`` a reading, ``take_batch`` what it consumed) driven as its thread
drives them, with judges taken over at any moment of a reading (a partition assigned
while a batch is in flight). Every judge reads each producer's chain whole, so no valid
checkpoint is judged a broken chain and every stream is signed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.identity_streams import stamped_events
from tests.unit.verify.test_trust import RING, checkpoints_of
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.consumers.verify_follow_trust import CheckpointRecord, TrustFeed
from turnaudit.identity import StreamId, stream_of
from turnaudit.kafka.partitioning import session_partition
from turnaudit.settings import KafkaSettings
from turnaudit.verify.follow_trust import FollowTrust

PARTITIONS = 3
CREATE_TIME = 1  # confluent_kafka.TIMESTAMP_CREATE_TIME: no append time to judge


def judge_of(partition: int) -> FollowTrust:
    def owns(stream: StreamId) -> bool:
        return session_partition(stream[0], PARTITIONS) == partition

    return FollowTrust(
        RING, grace_s=10.0, scope=partition, owns=owns, reports_checkpoints=partition == 0
    )


def read(
    feed: TrustFeed, records: list[CheckpointRecord], sizes: list[int], joins: dict[int, int]
) -> int:
    """The reader thread's loop over one checkpoints partition: each reading begins where
    ``begin`` says and consumes batches of ``sizes``; ``joins`` takes a partition over
    (batch number -> turn partition) after that batch was consumed, before it is taken.
    Returns how many readings it took."""
    readings, batch_no = 0, 0
    while True:
        starts = feed.begin({0: 0})
        assert starts is not None
        readings += 1
        at = starts[0]
        while at < len(records):
            batch = records[at : at + sizes[batch_no % len(sizes)]]
            joined = joins.pop(batch_no, None)
            batch_no += 1
            if joined is not None:
                feed.take_partition(joined, [])
            if not feed.take_batch(batch):
                break  # a judge was taken over: the reading begins again
            at += len(batch)
        else:
            return readings


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_judge_taken_over_while_a_batch_is_in_flight_reads_every_chain_whole(
    data: st.DataObject,
) -> None:
    events = stamped_events(data.draw(st.integers(20, 60)), sessions=6)
    written = checkpoints_of(events, max_turns=data.draw(st.integers(1, 6)))
    records: list[CheckpointRecord] = [
        (0, offset, c.encode(), (CREATE_TIME, c.at_ms)) for offset, c in enumerate(written)
    ]
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    later = data.draw(st.permutations(range(1, PARTITIONS)))
    moments = data.draw(
        st.lists(st.integers(0, 12), min_size=len(later), max_size=len(later), unique=True)
    )
    feed = TrustFeed(KafkaSettings(), judge_of, FollowMetrics(CollectorRegistry()))
    feed.take_partition(0, [])
    read(feed, records, sizes, dict(zip(moments, later, strict=True)))
    for p in later:  # a join drawn past the last batch: taken over after the reading
        if p not in feed.judges:
            feed.take_partition(p, [])
            read(feed, records, sizes, {})
    for s in events:
        event = s.event
        partition = session_partition(str(event["session_id"]), PARTITIONS)
        feed.observe(partition, event, s.value, now=0.0)
    status: dict[StreamId, str] = {}
    for p, judge in sorted(feed.judges.items()):
        assert (judge.invalid, judge.valid) == (0, len(written)), p
        status |= {s: t.status() for s, t in judge.streams.items() if t.partition == p}
    assert status == dict.fromkeys({stream_of(s.event) for s in events}, "signed")
