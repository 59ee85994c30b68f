"""The heads feed holds at most its bound of end announcements (plus the batch that crossed
it) while the proof is behind: the rest stay with the reader until the proof catches up, and
then every announcement is judged, none lost to the bound."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from turnaudit.consumers.verify_follow_heads import HeadsFeed, _Batch, _PassEnd, _PassStart
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.identity import StreamId
from turnaudit.settings import KafkaSettings
from turnaudit.stream_heads import HeadAnnouncement, StreamHead
from turnaudit.verify.heads_judge import EngineView

BATCHES, PER_BATCH, BOUND = 6, 5, 7
HIGH = 100  # the turn topic's end when the announcements were read


def ended(i: int) -> HeadAnnouncement:
    return HeadAnnouncement(StreamHead(f"s{i}", "p", 3, "h"), True, 200, "p")


def test_end_announcements_held_stay_within_the_bound_and_all_are_judged_once_caught_up() -> None:
    proved = {0: 0}
    retired: list[StreamId] = []
    engine = EngineView(
        last_position=lambda stream: 3 if proved[0] >= HIGH else None,
        partition_of=lambda stream: 0,
        proved_offset=proved.get,
        retire=lambda stream: retired.append(stream) is None,
    )
    feed = HeadsFeed(
        KafkaSettings(bootstrap_servers="127.0.0.1:1"),
        engine,
        FollowMetrics(CollectorRegistry()),
        max_waiting=BOUND,
        inbox=BATCHES + 2,  # the reader's whole pass queued up front
    )
    feed._put(_PassStart([], 1))
    for b in range(BATCHES):
        notes = [(ended(b * PER_BATCH + i), (0, b * PER_BATCH + i)) for i in range(PER_BATCH)]
        feed._put(_Batch(list(notes), {0: HIGH}, {0: 0}))
    feed._put(_PassEnd())
    held = []
    for _ in range(5):  # the proof is behind: each sweep takes nothing past the bound
        feed.sweep()
        held.append(feed.judge.waiting_ends())
    assert max(held) <= BOUND + PER_BATCH - 1
    assert max(held) >= BOUND  # the bound, not the budget, held the rest back
    assert not feed._inbox.empty()
    proved[0] = HIGH  # caught up: every announcement is judged, a stream ended whole each
    for _ in range(BATCHES + 2):
        feed.sweep()
        feed.checkpoint()
    assert feed.judge.waiting_ends() == 0
    assert feed._inbox.empty()
    assert sorted(retired) == sorted((f"s{i}", "p") for i in range(BATCHES * PER_BATCH))
