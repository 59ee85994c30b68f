"""``verify --follow``'s proof runs on the one stream tracker verify uses: over any range
with any fault, the follower counts the turns, the missing positions and (once the grace
has passed) the lost ones one-shot verify finds; with one or two streams in memory (the
rest spilled to disk) it concludes exactly what it does holding every stream, and holds no
more than its bound; stopped at any message and resumed from its checkpoint records, it
ends where an uninterrupted follower ends."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.faulty_ranges import FAULTS, Item, Message, faulty_ranges, stored
from tests.unit.verify import scenario
from turnaudit._native import stream_head, stream_partition, stream_state
from turnaudit.commands.verify import follow_state_view
from turnaudit.records import StoredRecord
from turnaudit.verify.follow import FollowState
from turnaudit.verify.follow_batch import follow_batch
from turnaudit.verify.follow_records import FollowMemory
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.verifier import Verifier

NOW = 1_800_000_000.0
GRACE = 60.0
ROOMY = FollowMemory(streams=1_000, event_ids=1 << 40)


def follower(memory: FollowMemory, tmp: Path) -> FollowState:
    state = FollowState(grace_s=GRACE, memory=FollowMemory(**{**vars(memory), "spill_dir": tmp}))
    for partition in (0, 1):
        state.load_partition(partition, first_offset=0, log_start=0)
    return state


def feed(state: FollowState, messages: Iterable[Message]) -> None:
    for m in messages:
        if m.partition not in state.partitions:
            state.load_partition(m.partition, first_offset=m.offset, log_start=0)
        decoded = scenario.DECODE(m.value)
        state.observe(m.partition, m.offset, m.key, m.value, event=decoded.event, now=NOW)


def one_shot(messages: list[Message]) -> Verifier:
    verifier = Verifier(
        scenario.DECODE, log_start_offsets={0: 0, 1: 0}, memory=IdMemory(event_ids=1 << 40)
    )
    for n, m in enumerate(messages):
        verifier.feed(m.partition, m.offset, m.key, m.value, 1_790_000_000_000 + n)
    return verifier


def missing(state: FollowState) -> dict[tuple[str, str], list[int]]:
    return {s: sorted(g.opened) for s, g in state.gaps.items() if g.opened}


@settings(max_examples=200, deadline=None)
@given(items=faulty_ranges())
def test_the_follower_concludes_what_one_shot_verify_concludes(
    tmp_path_factory: pytest.TempPathFactory, items: list[Item]
) -> None:
    messages = stored(items)
    state = follower(ROOMY, tmp_path_factory.mktemp("follow"))
    feed(state, messages)
    with one_shot(messages) as verifier:
        assert state.totals().proved == verifier.counts.turns
        assert missing(state) == {s: sorted(p) for s, p in verifier.tracker.missing().items()}
        assert state.sweep(NOW + GRACE) == verifier.lost_positions()
    assert state.sweep(NOW + 2 * GRACE) == 0  # each position lost once
    state.close()


@settings(max_examples=200, deadline=None)
@given(items=faulty_ranges(), streams=st.sampled_from([1, 2]))
def test_streams_spilled_to_disk_change_nothing_and_memory_holds_its_bound(
    tmp_path_factory: pytest.TempPathFactory, items: list[Item], streams: int
) -> None:
    messages = stored(items)
    roomy = follower(ROOMY, tmp_path_factory.mktemp("roomy"))
    tight = follower(FollowMemory(streams=streams, event_ids=1 << 40), tmp_path_factory.mktemp("t"))
    for m in messages:
        feed(roomy, [m])
        feed(tight, [m])
        assert tight.tracker.streams_in_memory() <= streams
    assert tight.totals() == roomy.totals()
    assert missing(tight) == missing(roomy)
    assert tight.streams_held() == roomy.streams_held()
    assert [r[1:] for r in tight.checkpoint()] == [r[1:] for r in roomy.checkpoint()]
    roomy.close()
    tight.close()


@settings(max_examples=100, deadline=None)
@given(items=faulty_ranges(), bound=st.sampled_from([1, 2, 3, 1_000]))
def test_a_streams_partition_and_last_position_are_what_its_state_holds_wherever_it_is(
    tmp_path_factory: pytest.TempPathFactory, items: list[Item], bound: int
) -> None:
    """In memory, in the spill's pending batch (a bound of 2 or 3 writes the file every 2
    or 3 streams) or in its file: the one lookup the heads judge makes (``stream_head``),
    and ``stream_partition`` and ``last_position`` alone, agree with the stream's state
    (read whole) and with the table of every stream's last position."""
    messages = stored(items)
    tight = follower(FollowMemory(streams=bound, event_ids=1 << 40), tmp_path_factory.mktemp("t"))
    feed(tight, messages)
    streams = {
        (str(e["session_id"]), str(e.get("producer_id") or ""))
        for e in (scenario.DECODE(m.value).event for m in messages)
        if e is not None
    }
    lasts = tight.tracker.last_positions()
    view = follow_state_view(tight)
    for session, producer in streams | {("no such session", "no such producer")}:
        held = stream_state(tight.tracker, session, producer)
        partition = held and held[0]
        last = lasts.get((session, producer))
        assert stream_partition(tight.tracker, session, producer) == partition
        assert tight.tracker.last_position(session, producer) == last
        head = stream_head(tight.tracker, session, producer)
        assert head == (None if held is None else (partition, last))
        # What the heads feed asks the follower: the partition where the stream's gaps
        # are, else the tracker's, and its last position, in one ask or two.
        gaps = tight.gaps.get((session, producer))
        read_from = partition if gaps is None else gaps.partition
        assert view.head_of((session, producer)) == (read_from, last)
        assert view.partition_of((session, producer)) == read_from
    tight.close()


# Faults whose outcome does not rest on event ids a restarted follower no longer remembers
# (a duplicate copy, or an id reused at a fresh position, after a restart is judged by its
# position alone; v1/v2 turns have no positions to judge by: see the module docstring of
# turnaudit.verify.follow).
POSITIONAL = tuple(f for f in FAULTS if f not in ("duplicate", "reuse_id"))


@settings(max_examples=200, deadline=None)
@given(items=faulty_ranges(POSITIONAL, with_legacy=False), data=st.data())
def test_a_follower_resumed_from_its_checkpoint_ends_as_an_uninterrupted_one(
    tmp_path_factory: pytest.TempPathFactory, items: list[Item], data: st.DataObject
) -> None:
    messages = stored(items)
    whole = follower(ROOMY, tmp_path_factory.mktemp("whole"))
    feed(whole, messages)
    cut = data.draw(st.integers(0, len(messages)))
    first = follower(ROOMY, tmp_path_factory.mktemp("first"))
    feed(first, messages[:cut])
    records = [(key, value) for _, key, value in first.checkpoint()]
    first.close()
    resumed = FollowState(
        grace_s=GRACE, memory=FollowMemory(streams=1, spill_dir=tmp_path_factory.mktemp("r"))
    )
    for partition in (0, 1):
        resumed.load_partition(partition, first_offset=0, log_start=0, records=records)
    feed(resumed, messages[cut:])  # what was proved before the cut is re-read, skipped
    assert resumed.totals().proved == whole.totals().proved
    assert missing(resumed) == missing(whole)
    assert resumed.sweep(NOW + GRACE) == whole.sweep(NOW + GRACE)
    whole.close()
    resumed.close()


def test_a_retired_stream_leaves_memory_and_its_record_becomes_a_tombstone(
    tmp_path: Path,
) -> None:
    messages = stored(
        [Item(i, e["session_id"].encode(), e) for i, e in enumerate(scenario_events())]
    )
    state = follower(ROOMY, tmp_path)
    feed(state, messages)
    stream = next(iter(state.tracker.last_positions()))
    state.checkpoint()
    held = state.streams_held()
    assert state.retire(stream)
    assert state.streams_held() == held - 1
    records = state.checkpoint()
    assert [value for _, key, value in records if stream[0] in key.decode()] == [None]
    assert not state.retire(stream)  # already gone
    state.close()


def scenario_events() -> list[dict[str, object]]:
    return [s.event for s in scenario.stamped_events(12, seed=5, producers=1, sessions=2)]


@settings(max_examples=200, deadline=None)
@given(items=faulty_ranges(), data=st.data())
def test_batches_through_the_native_step_conclude_what_message_by_message_does(
    tmp_path_factory: pytest.TempPathFactory, items: list[Item], data: st.DataObject
) -> None:
    """Any range cut into batches of any sizes: the ordinary messages settled by verify's
    native step, the others handed back, the proof, its gaps and its checkpoint records
    are those of the follower that takes the messages one at a time."""
    messages = stored(items)
    one_by_one = follower(ROOMY, tmp_path_factory.mktemp("one"))
    feed(one_by_one, messages)
    batched = FollowState(
        grace_s=GRACE,
        memory=FollowMemory(**{**vars(ROOMY), "spill_dir": tmp_path_factory.mktemp("b")}),
        decode=scenario.DECODE,
    )
    for partition in (0, 1):
        batched.load_partition(partition, first_offset=0, log_start=0)
    records = [
        StoredRecord("t", m.partition, m.offset, m.key, m.value, 1_790_000_000_000 + n)
        for n, m in enumerate(messages)
    ]
    at = 0
    while at < len(records):
        size = data.draw(st.integers(1, 8))
        follow_batch(batched, records[at : at + size], NOW)
        at += size
    mine, theirs = batched.totals(), one_by_one.totals()
    assert (mine.proved, mine.late, mine.chain, mine.lost) == (
        theirs.proved,
        theirs.late,
        theirs.chain,
        theirs.lost,
    )
    assert missing(batched) == missing(one_by_one)
    assert [r[1] for r in batched.checkpoint()] == [r[1] for r in one_by_one.checkpoint()]
    one_by_one.close()
    batched.close()
