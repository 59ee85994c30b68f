"""Turn identity: the stamper, the stream tracker, the chain (property tests, no broker)."""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.identity_streams import Stamped, stamped_events
from turnaudit.contracts import Contract, check_key, identity_breach
from turnaudit.identity import (
    GENESIS_HASH,
    LEGACY_PRODUCER,
    StreamTracker,
    TurnOutcome,
    TurnStamper,
    chain_hash,
    stream_of,
)
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

DECODE = TurnEventDeserializer(shipped_catalog())


def feed(tracker: StreamTracker, messages: list[tuple[int, Stamped]]) -> list[TurnOutcome]:
    """(offset, message) pairs into the tracker, all on partition 0; outcomes in order."""
    outcomes = []
    for offset, m in messages:
        event = DECODE(m.value).event
        outcomes.append(tracker.observe(event, m.value, partition=0, offset=offset).outcome)
    return outcomes


def test_stamper_chains_each_stream_from_genesis() -> None:
    events = stamped_events(60, producers=2)
    last: dict[tuple[str, str], tuple[int, str]] = {}
    for m in events:
        stream = stream_of(m.event)
        seq, prev = m.event["sequence"], m.event["prev_hash"]
        if stream not in last:
            assert (seq, prev) == (0, GENESIS_HASH)
        else:
            assert (seq, prev) == (last[stream][0] + 1, last[stream][1])
        last[stream] = (seq, chain_hash(m.value))
    assert len({p for _, p in last}) == 2  # two publisher instances, two producer ids


def test_a_restarted_publisher_writes_a_new_stream_not_redeliveries() -> None:
    first, second = TurnStamper(), TurnStamper()
    assert first.producer_id != second.producer_id
    events = [{"session_id": "s1"}, {"session_id": "s1"}]
    first.stamp(events[0])
    first.commit(events[0], b"x")
    second.stamp(events[1])
    assert events[1]["sequence"] == 0
    assert events[1]["producer_id"] == second.producer_id
    assert events[0]["event_id"] != events[1]["event_id"]


def test_stamper_eviction_continues_a_session_in_a_new_stream() -> None:
    stamper = TurnStamper(max_sessions=2)
    seen: set[tuple[str, str, int]] = set()
    for session in ["a", "b", "c", "a", "b", "c"]:
        event = {"session_id": session}
        stamper.stamp(event)
        position = (session, event["producer_id"], event["sequence"])
        assert position not in seen  # a position is never reused
        seen.add(position)
        stamper.commit(event, session.encode())


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(2, 3))
def test_reorders_redeliveries_and_duplicates_count_each_turn_once(
    rnd: random.Random, producers: int
) -> None:
    events = stamped_events(80, producers=producers)
    log = list(enumerate(events))
    # Local reorders: swap some neighbours (late arrivals).
    for i in range(0, len(log) - 1, 7):
        if rnd.random() < 0.5:
            log[i], log[i + 1] = log[i + 1], log[i]
    # Duplicate copies at other offsets, and the same offsets read again.
    copies = [(len(events) + j, log[rnd.randrange(len(log))][1]) for j in range(10)]
    reread = rnd.sample(log, 10)
    tracker = StreamTracker()
    outcomes = feed(tracker, log + copies + reread)
    assert outcomes.count(TurnOutcome.NEW) + outcomes.count(TurnOutcome.LATE) == len(events)
    assert outcomes.count(TurnOutcome.DUPLICATE) == len(copies)
    assert outcomes.count(TurnOutcome.REDELIVERY) == len(reread)
    assert tracker.currently_missing == 0
    assert not tracker.missing()


def test_a_late_arrival_brings_the_missing_figure_back_down() -> None:
    events = [m for m in stamped_events(40, sessions=1)][:6]
    tracker = StreamTracker()
    order = [0, 1, 3, 4, 2, 5]  # 2 arrives after 3 and 4
    figures = []
    for offset, i in enumerate(order):
        result = tracker.observe(
            DECODE(events[i].value).event, events[i].value, partition=0, offset=offset
        )
        figures.append(tracker.currently_missing)
        assert result.chain_break is None
        assert result.counts_as_turn
    assert figures == [0, 0, 1, 1, 0, 0]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_gap_at_the_start_and_in_the_middle_are_gaps(data: st.DataObject) -> None:
    events = stamped_events(60, sessions=2)
    # A stream's last event can go unnoticed (tail truncation, see the README): not those.
    last = {stream_of(m.event): i for i, m in enumerate(events)}
    droppable = [i for i in range(len(events)) if i not in last.values()]
    dropped = data.draw(st.sets(st.sampled_from(droppable), min_size=1, max_size=5))
    kept = [m for o, m in enumerate(events) if o not in dropped]
    tracker = StreamTracker()
    feed(tracker, list(enumerate(kept)))
    expected: dict[tuple[str, str], list[int]] = {}
    for i in sorted(dropped):
        expected.setdefault(stream_of(events[i].event), []).append(events[i].event["sequence"])
    assert tracker.missing() == expected
    assert tracker.currently_missing == len(dropped)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_without_start_gaps_a_stream_starts_at_its_first_turn_seen(data: st.DataObject) -> None:
    # An event-time window: turns before a stream's first one in the window are
    # not gaps, even read from the log start; gaps after it still are.
    events = stamped_events(60, sessions=3)
    last = {stream_of(m.event): i for i, m in enumerate(events)}
    droppable = [i for i in range(len(events)) if i not in last.values()]
    dropped = data.draw(st.sets(st.sampled_from(droppable), max_size=12))
    kept = [m for o, m in enumerate(events) if o not in dropped]
    tracker = StreamTracker(start_gaps=False, log_start_offsets={0: 0})
    feed(tracker, list(enumerate(kept)))
    first_kept = {}
    for m in kept:
        first_kept.setdefault(stream_of(m.event), m.event["sequence"])
    expected: dict[tuple[str, str], list[int]] = {}
    for i in sorted(dropped):
        stream, sequence = stream_of(events[i].event), events[i].event["sequence"]
        if sequence > first_kept[stream]:
            expected.setdefault(stream, []).append(sequence)
    assert tracker.missing() == expected
    assert tracker.currently_missing == sum(map(len, expected.values()))


def test_a_consumer_that_joined_mid_log_does_not_invent_a_start_gap() -> None:
    events = stamped_events(40, sessions=1)
    tracker = StreamTracker()
    outcomes = feed(tracker, [(100 + i, m) for i, m in enumerate(events[10:])])
    assert set(outcomes) == {TurnOutcome.NEW}
    assert tracker.currently_missing == 0


def test_same_event_id_with_other_content_is_a_breach_not_a_duplicate() -> None:
    events = stamped_events(10, sessions=1)
    event = dict(DECODE(events[3].value).event)
    event["pack_id"] = "edited"
    forged = SingleObjectSerializer(shipped_catalog().version(3))(event)
    tracker = StreamTracker()
    feed(tracker, list(enumerate(events)))
    result = tracker.observe(event, forged, partition=0, offset=99)
    assert result.outcome is TurnOutcome.CONTENT_CHANGED
    breach = identity_breach(result)
    assert breach is not None
    assert breach.contract is Contract.CHAIN


def test_an_edit_breaks_the_chain_at_the_next_position() -> None:
    events = stamped_events(10, sessions=1)
    event = dict(DECODE(events[4].value).event)
    event["turn"] += 1
    edited = Stamped(
        events[4].key, SingleObjectSerializer(shipped_catalog().version(3))(event), event
    )
    tracker = StreamTracker()
    breaks = [
        tracker.observe(DECODE(m.value).event, m.value, partition=0, offset=i).chain_break
        for i, m in enumerate([*events[:4], edited, *events[5:]])
    ]
    assert [i for i, b in enumerate(breaks) if b] == [5]
    assert "position 5" in (breaks[5] or "")
    assert "position 4" in (breaks[5] or "")


def test_another_event_at_a_taken_position_is_a_breach() -> None:
    events = stamped_events(10, sessions=1)
    event = dict(DECODE(events[2].value).event)
    event["event_id"] = "inserted"
    inserted = SingleObjectSerializer(shipped_catalog().version(3))(event)
    tracker = StreamTracker()
    feed(tracker, list(enumerate(events)))
    result = tracker.observe(event, inserted, partition=0, offset=50)
    assert result.outcome is TurnOutcome.POSITION_REUSED
    assert identity_breach(result) is not None


def test_dedupe_memory_is_bounded_and_old_redeliveries_stay_redeliveries() -> None:
    events = stamped_events(40, sessions=2)
    tracker = StreamTracker(max_event_ids=5)
    feed(tracker, list(enumerate(events)))
    assert tracker.forgotten_event_ids == len(events) - 5
    again = feed(tracker, list(enumerate(events[:10])))
    assert set(again) == {TurnOutcome.REDELIVERY}


def test_legacy_events_renumbered_by_a_restarted_publisher_are_new_turns() -> None:
    tracker = StreamTracker()
    encode = SingleObjectSerializer(shipped_catalog().version(2))
    outcomes = []
    for run in range(2):  # two publisher processes, numbering the session from 0 each
        for i, event in enumerate(
            TurnRuntimeSimulator(run, schema_versions=(2,), concurrent_sessions=1).events(5)
        ):
            event.update(event_id=f"run{run}-{i}", sequence=i, session_id="legacy")
            value = encode(event)
            decoded = DECODE(value).event
            assert stream_of(decoded) == ("legacy", LEGACY_PRODUCER)
            outcomes.append(tracker.observe(decoded, value, partition=0, offset=run * 5 + i))
    assert all(o.counts_as_turn for o in outcomes)


def test_contract_6_the_key_is_the_session_id() -> None:
    event = {"session_id": "s-1"}
    assert check_key(b"s-1", event) is None
    for key in (None, b"s-2", b""):
        breach = check_key(key, event)
        assert breach is not None
        assert breach.contract is Contract.KEY_IS_SESSION_ID


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=120), st.integers(1, 5))
def test_the_tracker_keeps_exactly_the_most_recently_seen_streams(
    order: list[int], bound: int
) -> None:
    """Against a reference LRU: at its bound the tracker forgets the stream seen
    least recently, whatever the order of arrivals."""
    tracker = StreamTracker(max_streams=bound, max_event_ids=10_000)
    model: OrderedDict[str, None] = OrderedDict()
    next_sequence: dict[str, int] = {}
    last_hash: dict[str, str] = {}
    for n, index in enumerate(order):
        session = f"s{index}"
        sequence = next_sequence.get(session, 0)
        value = f"{session}/{sequence}".encode()
        event = {
            "event_id": f"e{n}",
            "session_id": session,
            "producer_id": "p",
            "sequence": sequence,
            "prev_hash": last_hash[session] if sequence else GENESIS_HASH,
        }
        result = tracker.observe(event, value)
        assert result.outcome is TurnOutcome.NEW
        assert result.chain_break is None
        next_sequence[session], last_hash[session] = sequence + 1, chain_hash(value)
        model[session] = None
        model.move_to_end(session)
        if len(model) > bound:
            model.popitem(last=False)
    assert {session for session, _ in tracker.heads()} == set(model)
    assert len(tracker) == len(model)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=120), st.integers(1, 5))
def test_the_stamper_continues_exactly_the_most_recently_stamped_sessions(
    order: list[int], bound: int
) -> None:
    """A session the stamper still holds continues its stream; one it dropped
    (the least recently stamped, at its bound) starts a new stream at 0."""
    stamper = TurnStamper(max_sessions=bound)
    model: OrderedDict[str, tuple[str, int]] = OrderedDict()
    for index in order:
        session = f"s{index}"
        event: dict[str, Any] = {"session_id": session}
        stamper.stamp(event)
        if session in model:
            producer, sequence = model[session]
            assert (event["producer_id"], event["sequence"]) == (producer, sequence + 1)
        else:
            assert event["sequence"] == 0
        stamper.commit(event, f"{session}/{event['sequence']}".encode())
        model[session] = (event["producer_id"], event["sequence"])
        model.move_to_end(session)
        if len(model) > bound:
            model.popitem(last=False)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.booleans()), max_size=80))
def test_a_turn_whose_encoding_failed_uses_up_no_position(
    steps: list[tuple[int, bool, bool]],
) -> None:
    """Stamped but never committed (its encoding failed): the session's next turn takes
    the same position and chains to the same predecessor. A commit of an equal copy of
    the stamped event (not the same object) places it just the same."""
    stamper = TurnStamper()
    committed: dict[str, tuple[int, str]] = {}
    for index, encoded, as_copy in steps:
        session = f"s{index}"
        event: dict[str, Any] = {"session_id": session}
        stamper.stamp(event)
        expected = committed.get(session, (-1, GENESIS_HASH))
        assert (event["sequence"], event["prev_hash"]) == (expected[0] + 1, expected[1])
        if encoded:
            value = f"{session}/{event['sequence']}".encode()
            head = stamper.commit(dict(event) if as_copy else event, value)
            assert head == chain_hash(value)
            committed[session] = (event["sequence"], head)
