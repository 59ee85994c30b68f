"""The follower admits a batch natively (``VerifyStep.admit``): for any messages (any
partitions, offsets going back and forth, no partition or offset at all, any
timestamps) it keeps what its former Python loop kept, in order, and moves each
partition's offset, event time and counts as that loop did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.verify import scenario
from turnaudit.identity import TrackResult
from turnaudit.records import StoredRecord
from turnaudit.serialization.native import VerifyStep
from turnaudit.serialization.read_plans import DecodedTurnEvent
from turnaudit.verify.follow import FollowState
from turnaudit.verify.native_step import feed_batch


@dataclass(frozen=True)
class Message:
    """A consumed message as the follower asks it (confluent-kafka's methods)."""

    at: int | None
    place: int | None
    stamp: int

    def partition(self) -> int | None:
        return self.at

    def offset(self) -> int | None:
        return self.place

    def timestamp(self) -> tuple[int, int]:
        return (1, self.stamp)


Met = dict[int, tuple[int, int | None, int, int]]


def python_loop(batch: list[Message], next_offsets: dict[int, int]) -> tuple[list[Message], Met]:
    """``follow_batch``'s former loop, on plain counters (next offset, event time, taken,
    read again per partition)."""
    live: list[Message] = []
    met: Met = {}
    for msg in batch:
        partition, offset = msg.partition() or 0, msg.offset() or 0
        nxt, stamp, taken, again = met.get(partition, (next_offsets[partition], None, 0, 0))
        if offset < nxt:
            met[partition] = (nxt, stamp, taken, again + 1)
            continue
        now = msg.timestamp()[1]
        met[partition] = (offset + 1, now if stamp is None else max(stamp, now), taken + 1, again)
        live.append(msg)
    return live, met


partitions = st.none() | st.integers(0, 3)
messages = st.builds(
    Message, partitions, st.none() | st.integers(0, 40), st.integers(-(2**40), 2**40)
)
offsets = st.fixed_dictionaries({p: st.integers(0, 30) for p in range(4)})


@given(st.lists(messages, max_size=60), offsets)
def test_admit_keeps_and_counts_what_the_python_loop_did(
    batch: list[Message], next_offsets: dict[int, int]
) -> None:
    live, met = VerifyStep.admit(batch, next_offsets)
    want_live, want_met = python_loop(batch, next_offsets)
    assert live == want_live
    assert all(a is b for a, b in zip(live, want_live, strict=True))
    assert met == want_met


@given(st.lists(messages, min_size=1, max_size=10))
def test_a_partition_the_follower_does_not_hold_is_a_key_error(batch: list[Message]) -> None:
    with pytest.raises(KeyError):
        VerifyStep.admit(batch, {})


# -- What admitting read, kept for the step's run ------------------------------------
# ``admit_for_run`` keeps each admitted message's partition, offset and timestamp for
# ``run`` over the list it returned. Over real turns in any partitions, offsets and
# timestamps, that run concludes what a run asking every message concludes; a message
# replaced in the list in between is asked again.

STAMPED = scenario.stamped_events(24, seed=5, producers=2, sessions=3)


class Recorder:
    """A ``BatchVerifier`` that writes down what the step hands back, in order."""

    def __init__(self) -> None:
        self.messages = 0
        self.seen: list[tuple[object, ...]] = []

    def feed(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None:
        self.seen.append(("feed", partition, offset, key, value, timestamp_ms))

    def not_a_turn(self, exc: Exception, partition: int, offset: int) -> None:
        self.seen.append(("not a turn", type(exc), partition, offset))

    def conclude(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        *,
        decoded: DecodedTurnEvent,
        result: TrackResult,
        opened: bool,
    ) -> None:
        self.seen.append(("conclude", partition, offset, decoded.event, result, opened))

    def stamped(self, timestamp_ms: int) -> None:
        self.seen.append(("stamped", timestamp_ms))


def stepped(batch: list[Any], next_offsets: dict[int, int], *, kept: bool) -> list[object]:
    """The batch admitted and run by a fresh follower's step: with what admitting read
    kept (``kept``), or with every message asked again (``admit``, then a copy run)."""
    state = FollowState(decode=scenario.DECODE)
    try:
        for partition in next_offsets:
            state.load_partition(partition, first_offset=0, log_start=0)
        step = state.step
        assert step is not None
        if kept:
            live, met = step.admit_for_run(batch, next_offsets)
        else:
            live, met = VerifyStep.admit(batch, next_offsets)
            live = list(live)
        recorder = Recorder()
        feed_batch(recorder, step, live)
        return [met, recorder.messages, *recorder.seen]
    finally:
        state.close()


@st.composite
def turn_batches(draw: st.DrawFn) -> list[StoredRecord]:
    """Real turns in order, each given any partition, offset and timestamp."""
    count = draw(st.integers(1, len(STAMPED)))
    return [
        StoredRecord(
            "t",
            draw(st.integers(0, 2)),
            draw(st.integers(0, 30)),
            s.key,
            s.value,
            timestamp_ms=draw(st.integers(1, 2**40)),
        )
        for s in STAMPED[:count]
    ]


@given(turn_batches(), st.fixed_dictionaries({p: st.integers(0, 10) for p in range(3)}))
@settings(max_examples=300, deadline=None)
def test_a_run_over_the_admitted_list_concludes_what_asking_every_message_does(
    batch: list[StoredRecord], next_offsets: dict[int, int]
) -> None:
    assert stepped(batch, next_offsets, kept=True) == stepped(batch, next_offsets, kept=False)


@given(turn_batches(), st.data())
@settings(max_examples=200, deadline=None)
def test_a_message_replaced_after_admitting_is_asked_again(
    batch: list[StoredRecord], data: st.DataObject
) -> None:
    next_offsets = dict.fromkeys(range(3), 0)
    runs = []
    for kept in (True, False):
        state = FollowState(decode=scenario.DECODE)
        try:
            for partition in next_offsets:
                state.load_partition(partition, first_offset=0, log_start=0)
            step = state.step
            assert step is not None
            live, _ = step.admit_for_run(batch, next_offsets) if kept else (list(batch), None)
            # Every message replaced by one with its own partition, offset and timestamp
            # (the same key and value), drawn once: both runs see the same list.
            if kept:
                replaced = [
                    StoredRecord(
                        "t",
                        data.draw(st.integers(0, 2)),
                        data.draw(st.integers(0, 30)),
                        msg.key(),
                        msg.value(),
                        timestamp_ms=data.draw(st.integers(1, 2**40)),
                    )
                    for msg in live
                ]
            live[:] = replaced
            recorder = Recorder()
            feed_batch(recorder, step, live)
            runs.append([recorder.messages, *recorder.seen])
        finally:
            state.close()
    # The run over the admitted list, changed, concludes and stamps what a run that
    # never admitted concludes over the same messages.
    assert runs[0] == runs[1]


# -- The follower's examination of a consumed batch (``VerifyStep.positions``) -------


@dataclass(frozen=True)
class Consumed:
    """A consumed message: no position for librdkafka's error events, any timestamp."""

    at: int | None
    place: int | None
    stamp: int | None

    def partition(self) -> int | None:
        return self.at

    def offset(self) -> int | None:
        return self.place

    def timestamp(self) -> tuple[int, int | None]:
        return (1, self.stamp)


def examined_in_python(
    records: list[Consumed],
) -> tuple[list[Consumed], dict[int, tuple[int, int]]]:
    """``FollowValidation.examine_batch``'s former loop: the messages with a position, and
    per partition the offset it was loaded from (its first) and the next offset."""
    placed: list[Consumed] = []
    met: dict[int, tuple[int, int]] = {}
    for msg in records:
        partition, offset = msg.partition(), msg.offset()
        if partition is None or offset is None:
            continue
        first = met[partition][0] if partition in met else offset
        met[partition] = (first, offset + 1)
        placed.append(msg)
    return placed, met


consumed = st.builds(
    Consumed,
    st.none() | st.integers(0, 3),
    st.none() | st.integers(0, 40),
    st.none() | st.integers(-(2**40), 2**40),
)


@given(st.lists(consumed, max_size=60))
def test_positions_keeps_and_meets_what_the_examining_loop_did(records: list[Consumed]) -> None:
    step = FollowState(decode=scenario.DECODE)
    try:
        assert step.step is not None
        placed, met = step.step.positions(records)
        want_placed, want_met = examined_in_python(records)
        assert all(a is b for a, b in zip(placed, want_placed, strict=True))
        assert met == want_met
        assert list(met) == list(want_met)  # partitions in the order first met (loaded so)
    finally:
        step.close()


stamped = st.builds(
    Consumed,
    st.none() | st.integers(0, 3),
    st.none() | st.integers(0, 40),
    st.integers(-(2**40), 2**40),
)


@given(st.lists(stamped, max_size=60), offsets, st.data())
def test_admitting_the_positioned_list_admits_what_asking_every_message_does(
    records: list[Consumed], next_offsets: dict[int, int], data: st.DataObject
) -> None:
    state = FollowState(decode=scenario.DECODE)
    try:
        step = state.step
        assert step is not None
        placed, _ = step.positions(records)
        # Messages replaced after positioning are asked again.
        for _ in range(data.draw(st.integers(0, 3)) if placed else 0):
            placed[data.draw(st.integers(0, len(placed) - 1))] = data.draw(stamped)
        want = VerifyStep.admit(list(placed), next_offsets)
        live, met = step.admit_for_run(placed, next_offsets)
        assert met == want[1]
        assert all(a is b for a, b in zip(live, want[0], strict=True))
    finally:
        state.close()
