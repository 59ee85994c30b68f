"""The follower's live judgement of announced stream ends (``turnaudit.verify.heads_judge``)
against one-shot verify's rule (``turnaudit.verify.crash.stream_ends``), over any
announcements, liveness, lag, partitions held and last positions:

* caught up, the follower has counted, for each stream on its partitions, exactly the turns
  one-shot verify counts lost in a crash or with a vanished producer, and each cut stream
  once; the producers vanished are those silent past the bound with open streams;
* at every moment before, it has counted no turn one-shot does not (a follower that lags
  never counts turns that are merely not read yet);
* a restart (the checkpoint loaded back, every record read again) counts nothing again;
* a vanished producer that announces again is vanished no more.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.identity import StreamId
from turnaudit.stream_heads import HeadAnnouncement, Liveness, StreamHead
from turnaudit.verify.crash import LatestAnnouncements, stream_ends
from turnaudit.verify.heads_judge import EngineView, HeadsJudge, StreamLoss, Vanishing

NOW_MS = 1_000_000
INTERVAL_MS = 1_000  # every producer's liveness interval: vanished after 8 s of silence
PARTITIONS = 2
T = TypeVar("T")
FATES = ("alive", "closed", "crashed", "vanished")


def partition_of_session(session: str, partitions: int) -> int:
    return int(session[1:]) % partitions  # the test's keyed placement


@dataclass
class World:
    """Streams with the turns stored on the topic, producers with their fate, the
    announcement log, and which partitions the member holds (some only later)."""

    fates: dict[str, str]
    streams: dict[StreamId, tuple[int | None, list[int]]]  # last stored, heads announced
    log: list[HeadAnnouncement | Liveness]
    offsets: dict[int, list[tuple[StreamId, int]]]  # per partition: (stream, position)
    whole: bool  # the turn topic's log start is 0
    held: set[int]
    held_late: set[int]  # held only once the first pass is over
    rng: random.Random

    def high(self) -> dict[int, int]:
        return {p: len(self.offsets.get(p, [])) for p in range(PARTITIONS)}

    def low(self) -> dict[int, int]:
        return {p: 0 if self.whole else 1 for p in range(PARTITIONS)}


@st.composite
def worlds(draw: st.DrawFn) -> World:
    rng = draw(st.randoms(use_true_random=False))
    producers = ["pa", "pb", "pc"]
    fates = {p: draw(st.sampled_from(FATES)) for p in producers}
    streams: dict[StreamId, tuple[int | None, list[int]]] = {}
    for i in range(draw(st.integers(1, 8))):
        last = draw(st.one_of(st.none(), st.integers(0, 6)))
        heads = sorted(draw(st.lists(st.integers(0, 9), min_size=1, max_size=3)))
        streams[(f"s{i}", draw(st.sampled_from(producers)))] = (last, heads)
    offsets: dict[int, list[tuple[StreamId, int]]] = {}
    for p in range(PARTITIONS):  # each stream's turns in order, the streams interleaved
        turns = [
            [(stream, q) for q in range(0 if last is None else last + 1)]
            for stream, (last, _) in streams.items()
            if partition_of_session(stream[0], PARTITIONS) == p
        ]
        offsets[p] = merged(turns, rng)
    held = draw(st.sets(st.sampled_from(range(PARTITIONS))))
    late = draw(st.sets(st.sampled_from(sorted(held)))) if held else set()
    world = World(fates, streams, [], offsets, draw(st.booleans()), held, late, rng)
    world.log = announcement_log(world, compacted=draw(st.booleans()))
    return world


def announcement_log(world: World, *, compacted: bool) -> list[HeadAnnouncement | Liveness]:
    """Each producer's records in its own order (open heads and liveness over time, then
    its end), the producers' records merged at random; compacted: the latest per key."""
    per_producer: dict[str, list[HeadAnnouncement | Liveness]] = {}
    for producer, fate in world.fates.items():
        mine = [(s, heads) for s, (_, heads) in world.streams.items() if s[1] == producer]
        records: list[HeadAnnouncement | Liveness] = []
        rounds = max([len(h) for _, h in mine] or [1])
        last_at = NOW_MS - 500 if fate == "alive" else 2_000
        for n in range(rounds):
            for stream, heads in mine:
                if n < len(heads):
                    head = StreamHead(stream[0], producer, heads[n], "h")
                    records.append(
                        HeadAnnouncement(
                            head, False, 200, producer, open=True, pack=f"k{stream[0]}"
                        )
                    )
            records.append(Liveness(producer, last_at - (rounds - n) * 10, INTERVAL_MS, False))
        if fate in ("closed", "crashed"):
            for stream, heads in mine:
                head = StreamHead(stream[0], producer, heads[-1], "h")
                by = producer if fate == "closed" else producer + "-successor"
                records.append(HeadAnnouncement(head, fate == "closed", 200, by))
        if fate == "closed":
            records.append(Liveness(producer, last_at, INTERVAL_MS, True))
        per_producer[producer] = records
    log = merged(list(per_producer.values()), world.rng)
    if compacted:
        latest: dict[object, int] = {}
        for i, record in enumerate(log):
            key = record.producer_id if isinstance(record, Liveness) else record.key()
            latest[key] = i
        log = [r for i, r in enumerate(log) if i in set(latest.values())]
    return log


def merged(sequences: list[list[T]], rng: random.Random) -> list[T]:
    """The sequences interleaved at random, each in its own order."""
    out: list[T] = []
    queues = [list(s) for s in sequences if s]
    while queues:
        chosen = rng.choice(queues)
        out.append(chosen.pop(0))
        queues = [q for q in queues if q]
    return out


@dataclass
class Follower:
    """The state engine as the judge sees it: the partitions held, proved up to an offset."""

    world: World
    proved: dict[int, int] = field(default_factory=dict)
    gone: set[StreamId] = field(default_factory=set)  # retired: left the engine
    retired: list[StreamId] = field(default_factory=list)

    def view(self) -> EngineView:
        return EngineView(self.last_position, self.partition_of, self.proved_offset, self.retire)

    def retire(self, stream: StreamId) -> bool:
        if stream in self.gone:
            return False
        self.gone.add(stream)
        self.retired.append(stream)
        return True

    def proved_offset(self, partition: int) -> int | None:
        return self.proved.get(partition)

    def last_position(self, stream: StreamId) -> int | None:
        p = partition_of_session(stream[0], PARTITIONS)
        upto = self.proved.get(p)
        if upto is None or stream in self.gone:
            return None
        seen = [q for s, q in self.world.offsets.get(p, [])[:upto] if s == stream]
        return max(seen) if seen else None

    def partition_of(self, stream: StreamId) -> int | None:
        if self.last_position(stream) is None:
            return None
        return partition_of_session(stream[0], PARTITIONS)

    def advance(self, rng: random.Random) -> None:
        high = self.world.high()
        for p in self.proved:
            self.proved[p] = min(high[p], self.proved[p] + rng.randint(0, 3))


def one_shot(world: World) -> tuple[dict[StreamId, tuple[str, int]], set[StreamId]]:
    """Per stream on a held partition: one-shot verify's (cause, turns lost); the cut ones."""
    latest = LatestAnnouncements()
    latest.add_values(r.encode() for r in world.log)
    seen = {s: last for s, (last, _) in world.streams.items() if last is not None}
    ends = stream_ends(latest, seen, whole_stream=world.whole, now_ms=NOW_MS)
    lost: dict[StreamId, tuple[str, int]] = {}
    cut: set[StreamId] = set()
    for end in ends.streams:
        stream = (end["session_id"], end["producer_id"])
        if partition_of_session(stream[0], PARTITIONS) not in world.held:
            continue
        if end["status"] == "cut":
            cut.add(stream)
        if end["lost_in_crash"]:
            lost[stream] = ("crash", end["lost_in_crash"])
        elif end["lost_vanished"]:
            lost[stream] = ("vanished", end["lost_vanished"])
    return lost, cut


def read_all(
    judge: HeadsJudge,
    world: World,
    follower: Follower,
    judged: list[StreamLoss],
    loaded: list[tuple[bytes, bytes | None]],
    *,
    lag: bool,
    loaded_back: list[tuple[bytes, bytes | None]],
) -> list[Vanishing]:
    """One pass over the log in batches (the follower progressing between them when it
    lags), with the invariant checked after each judgement."""
    judge.start_pass(loaded, PARTITIONS)
    log = world.log
    i = 0
    while i < len(log):
        size = world.rng.randint(1, 4)
        for offset, record in enumerate(log[i : i + size], start=i):
            if isinstance(record, Liveness):
                judge.take_liveness(record, NOW_MS)
            else:
                judge.take(record, world.high(), world.low(), (0, offset))
            judge.marks.read_to((0, offset))
        i += size
        if world.rng.random() < 0.3:
            loaded_back.extend(judge.checkpoint())  # a flush now and then retires streams
        if lag:
            follower.advance(world.rng)
        judged += judge.judge()
        never_over(world, judged)
    return judge.end_pass(NOW_MS)


def never_over(world: World, judged: list[StreamLoss]) -> None:
    reference, cut = one_shot(world)
    counted: dict[StreamId, int] = {}
    cuts: dict[StreamId, int] = {}
    for loss in judged:
        counted[loss.stream] = counted.get(loss.stream, 0) + loss.lost
        cuts[loss.stream] = cuts.get(loss.stream, 0) + loss.cut
    for stream, n in counted.items():
        assert n <= reference.get(stream, ("", 0))[1], (stream, n, reference)
    assert all(n <= 1 for n in cuts.values())
    assert {s for s, n in cuts.items() if n} <= cut


@dataclass
class Run:
    judge: HeadsJudge
    judged: list[StreamLoss]
    vanishings: list[Vanishing]
    follower: Follower
    written: list[tuple[bytes, bytes | None]]  # every checkpoint record, in order


def follow(
    world: World,
    loaded: list[tuple[bytes, bytes | None]] | None = None,
    gone: set[StreamId] | None = None,
    *,
    proved_from: dict[int, int] | None = None,
) -> Run:
    """The feed's protocol: a first pass while lagging; the partitions held late taken
    over; passes while the judge wants them (each loading what was written so far); the
    follower caught up; two flushes (the second retires what the first covered).
    ``proved_from``: where each partition's checkpoint proved to (default: nothing)."""
    start = proved_from or {}
    follower = Follower(
        world, {p: start.get(p, 0) for p in world.held - world.held_late}, set(gone or ())
    )
    run = Run(HeadsJudge(follower.view(), partition_of_session), [], [], follower, [])
    judge, written = run.judge, run.written
    written += loaded or []
    run.vanishings += read_all(
        judge, world, follower, run.judged, list(written), lag=True, loaded_back=written
    )
    for p in world.held_late:
        follower.proved[p] = start.get(p, 0)
    while judge.refresh(NOW_MS):
        run.vanishings += read_all(
            judge, world, follower, run.judged, list(written), lag=True, loaded_back=written
        )
    follower.proved.update({p: world.high()[p] for p in world.held})
    run.judged += judge.judge()
    written += judge.checkpoint()
    written += judge.checkpoint()
    assert not judge.refresh(NOW_MS)
    return run


def ended_whole(world: World) -> set[StreamId]:
    """Streams closed cleanly on a held partition whose last stored turn is their head."""
    return {
        stream
        for stream, (last, heads) in world.streams.items()
        if world.fates[stream[1]] == "closed"
        and partition_of_session(stream[0], PARTITIONS) in world.held
        and last is not None
        and last >= heads[-1]
    }


def vanished_with_streams(world: World) -> set[str]:
    return {
        p
        for p, fate in world.fates.items()
        if fate == "vanished" and any(s[1] == p for s in world.streams)
    }


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_caught_up_the_follower_counts_what_one_shot_verify_counts(world: World) -> None:
    run = follow(world)
    judge, judged = run.judge, run.judged
    reference, cut = one_shot(world)
    counted: dict[StreamId, tuple[str, int]] = {}
    for loss in judged:
        if loss.lost:
            cause, n = counted.get(loss.stream, (loss.cause, 0))
            counted[loss.stream] = (cause, n + loss.lost)
    assert counted == reference
    assert {loss.stream for loss in judged if loss.cut} == cut
    vanished = vanished_with_streams(world)
    assert judge.vanished_producers() == len(vanished)
    at_risk = [
        s
        for s in world.streams
        if s[1] in vanished and partition_of_session(s[0], PARTITIONS) in world.held
    ]
    assert judge.streams_at_risk() == len(at_risk)
    assert judge.waiting() == 0


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_caught_up_exactly_the_streams_that_ended_whole_are_retired_once(world: World) -> None:
    run = follow(world)
    assert sorted(run.follower.retired) == sorted(ended_whole(world))
    assert run.judge.retired == len(ended_whole(world))


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_a_restart_from_the_checkpoint_counts_nothing_again_not_even_a_retired_stream(
    world: World,
) -> None:
    first = follow(world)
    again = World(**{**world.__dict__, "rng": random.Random(7)})
    run = follow(again, first.written, gone=first.follower.gone)
    assert [loss for loss in run.judged if loss.lost or loss.cut] == []
    assert run.vanishings == []
    assert run.follower.retired == []  # each retired once


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_a_vanished_producer_that_announces_again_is_vanished_no_more(world: World) -> None:
    judge = follow(world).judge
    before = judge.vanished_producers()
    for producer, fate in world.fates.items():
        if fate == "vanished":
            judge.take_liveness(Liveness(producer, NOW_MS, INTERVAL_MS, False), NOW_MS)
    assert judge.vanished_producers() == 0
    assert judge.streams_at_risk() == 0
    assert before == 0 or not judge.refresh(NOW_MS)  # nothing left to collect


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_a_group_counts_each_stream_on_its_member_and_each_vanished_producer_once(
    world: World,
) -> None:
    """Two members holding complementary partitions: together they count what one-shot
    verify counts over every partition, and each vanished producer once between them."""
    every = set(range(PARTITIONS))
    first = World(**{**world.__dict__, "held": world.held, "held_late": set()})
    other = World(**{**world.__dict__, "held": every - world.held, "held_late": set()})
    runs = [follow(first), follow(other)]
    counted: dict[StreamId, int] = {}
    for run in runs:
        for loss in run.judged:
            counted[loss.stream] = counted.get(loss.stream, 0) + loss.lost
    whole = World(**{**world.__dict__, "held": every})
    assert {s: n for s, n in counted.items() if n} == {
        s: n for s, (_, n) in one_shot(whole)[0].items()
    }
    producers = sorted(v.producer for run in runs for v in run.vanishings)
    assert producers == sorted(vanished_with_streams(world))


def test_a_lagging_follower_waits_for_the_offset_the_announcement_was_read_at() -> None:
    """The announcement is read when the turn topic holds 5 turns of the stream on
    partition 0; proved to offset 3 the follower counts nothing, at 5 it counts 9 - 4."""
    proved: dict[int, int] = {0: 3}
    last = {3: 2, 5: 4}
    view = EngineView(lambda s: last[proved[0]], lambda s: 0, proved.get)
    judge = HeadsJudge(view, lambda s, n: 0)
    judge.start_pass([], 1)
    note = HeadAnnouncement(StreamHead("s", "p", 9, "h"), False, 200, "q", pack="general")
    judge.take(note, {0: 5}, {0: 0})
    assert judge.judge() == []
    assert judge.waiting() == 1
    proved[0] = 5
    (loss,) = judge.judge()
    assert (loss.cause, loss.lost, loss.cut, loss.pack) == ("crash", 5, True, "general")
    assert judge.waiting() == 0


@settings(max_examples=300, deadline=None)
@given(worlds(), st.data())
def test_a_stream_whose_tombstone_a_kill_lost_is_retired_by_the_next_run_counting_nothing(
    world: World, data: st.DataObject
) -> None:
    """A run killed after the judged-to mark covering a stream's end was written, before the
    stream's tombstone: the next run holds the stream again (restored from its state record)
    though its announcement was judged, and retires it, counting nothing again."""
    first = follow(world)
    retired = sorted(first.follower.gone)
    landed = set(data.draw(st.lists(st.sampled_from(retired), unique=True))) if retired else set()
    again = World(**{**world.__dict__, "rng": random.Random(7)})
    run = follow(again, first.written, gone=landed, proved_from=world.high())
    assert [loss for loss in run.judged if loss.lost or loss.cut] == []
    assert sorted(run.follower.retired) == sorted(set(retired) - landed)
