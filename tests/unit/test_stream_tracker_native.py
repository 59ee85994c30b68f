"""The native ``StreamTracker`` against ``ReferenceStreamTracker``, the rules in Python:
for any sequence of messages (in order, gaps, late arrivals, redeliveries, duplicate
copies, changed content, reused positions, broken and missing chain links, v1/v2 legacy
streams, messages without a place), under any bounds (ids and streams forgotten, gaps
beyond the per-stream bound), with or without a store of forgotten ids, across
partitions forgotten, a pickle round trip and two trackers merged: the same result for
every message and the same tables and counters after."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.reference_tracker import ReferenceStreamTracker
from turnaudit.chain import GENESIS_HASH, chain_hash
from turnaudit.identity import StreamTracker
from turnaudit.serialization.native import chain_hash_hex
from turnaudit.stream_tracking import Seen, TrackResult

SESSIONS = ("s0", "\u00e91", "\U0001f6002")  # non-ASCII: heads sorted natively as Python sorts
PRODUCERS = ("", "p1", "p2")  # "": a v1/v2 event (no producer id), one legacy stream
FRAMES = (b"\xc3\x01" + bytes(8), b"\x00" + bytes(4), b"")  # single-object, registry, none


def value_of(stream: int, position: int, variant: int, frame: int = 0) -> bytes:
    return FRAMES[frame] + f"{stream}|{position}|{variant}".encode()


def event_id_of(stream: int, position: int, variant: int) -> str:
    return f"e-{stream}-{position}-{variant}"


class DictStore:
    """A store of forgotten ids (what verify's spill file is), in a dict."""

    def __init__(self) -> None:
        self.kept: dict[str, Seen] = {}

    def keep_many(self, dropped: list[tuple[str, Seen]]) -> None:
        self.kept.update(dropped)

    def recall(self, event_id: str) -> Seen | None:
        return self.kept.get(event_id)


@dataclass
class Message:
    event: dict[str, Any]
    value: bytes
    partition: int | None
    offset: int | None


@dataclass
class Feed:
    """Turns drawn steps into messages, with offsets per partition."""

    offsets: dict[int, int] = field(default_factory=dict)
    sent: list[Message] = field(default_factory=list)
    high: dict[int, int] = field(default_factory=dict)  # per stream: highest position sent
    holes: dict[int, set[int]] = field(default_factory=dict)  # per stream: skipped positions

    def message(self, step: tuple[Any, ...]) -> Message | None:
        if step[0] == "repeat":
            if not self.sent:
                return None
            _, index, same_place = step
            old = self.sent[index % len(self.sent)]
            if same_place:
                return old
            return self._placed(old.event, old.value, old.partition)
        _, stream, move, k, variant, same_id, prev_mode, partition, frame, raw_sequence = step
        high = self.high.get(stream, -1)
        holes = self.holes.setdefault(stream, set())
        if move == "fill" and holes:  # a skipped position arrives late
            position = sorted(holes)[k % len(holes)]
        else:
            position = {
                "next": high + 1,
                "skip": high + 1 + k,
                "back": max(0, high - k),
                "at": k,
                "fill": high + 1,
            }[move]
        holes.update(range(high + 1, position))
        holes.discard(position)
        self.high[stream] = max(high, position)
        session, producer = SESSIONS[stream % 3], PRODUCERS[stream // 3]
        prev: object
        if prev_mode == "right":
            prev = GENESIS_HASH if position == 0 else chain_hash(value_of(stream, position - 1, 0))
        else:
            prev = {
                "wrong": "ab" * 32,
                "none": None,
                "genesis": GENESIS_HASH,
                "text": "not a hash",
                "empty": "",
            }[prev_mode]
        event: dict[str, Any] = {
            "session_id": session,
            "event_id": event_id_of(stream, position, 0 if same_id else variant),
            "sequence": str(position) if raw_sequence else position,
            "prev_hash": prev,
        }
        if producer:
            event["producer_id"] = producer
        elif stream % 2:
            event["producer_id"] = None
        return self._placed(event, value_of(stream, position, variant, frame), partition)

    def _placed(self, event: dict[str, Any], value: bytes, partition: int | None) -> Message:
        offset = None
        if partition is not None:
            offset = self.offsets.get(partition, 0)
            self.offsets[partition] = offset + 1
        message = Message(event, value, partition, offset)
        self.sent.append(message)
        return message


new_message = st.tuples(
    st.just("msg"),
    st.integers(0, 8),  # stream: session x producer
    st.sampled_from(["next"] * 5 + ["skip", "fill", "fill", "back", "at"]),
    st.integers(0, 6),  # next after the stream's highest sent, k past it, a skipped
    # one arriving late, k before it, or k itself
    st.sampled_from([0, 0, 0, 1, 2]),  # content variant
    st.booleans(),  # a variant keeps variant 0's event id (changed content)
    st.sampled_from(["right"] * 8 + ["wrong", "none", "genesis", "text", "empty"]),
    st.one_of(st.none(), st.integers(0, 2)),  # partition (None: no place)
    st.sampled_from([0, 0, 0, 1, 2]),  # framing
    st.sampled_from([False] * 9 + [True]),  # sequence given as text (int() taken)
)

message_steps = st.one_of(
    # Mostly messages: one_of picks its branches alike.
    new_message,
    new_message,
    new_message,
    new_message,
    new_message,
    new_message,
    st.tuples(st.just("repeat"), st.integers(0, 200), st.booleans()),
    st.tuples(st.just("forget"), st.frozensets(st.integers(0, 2), max_size=2)),
    st.tuples(st.just("pickle")),
)

bounds = st.fixed_dictionaries(
    {
        "max_event_ids": st.integers(1, 40),
        "max_streams": st.integers(1, 10),
        "max_missing": st.one_of(st.integers(0, 3), st.just(1_000)),
        "log_start_offsets": st.one_of(
            st.none(), st.dictionaries(st.integers(0, 2), st.integers(-1, 3))
        ),
        "start_gaps": st.booleans(),
        "forget_batch": st.sampled_from([1, 1, 2, 5]),
    }
)


def result_fields(result: TrackResult) -> tuple[object, ...]:
    assert type(result) is TrackResult
    return tuple(result)


def tables(tracker: StreamTracker | ReferenceStreamTracker) -> dict[str, object]:
    return {
        "missing": tracker.missing(),
        "untracked": tracker.untracked_missing(),
        "heads": tracker.heads(),
        "last": tracker.last_positions(),
        "remembered": list(tracker.remembered().items()),
        "streams": len(tracker),
        "currently_missing": tracker.currently_missing,
        "new_turns": tracker.new_turns,
        "forgotten": tracker.forgotten_event_ids,
    }


def run_both(
    steps: list[tuple[Any, ...]], options: dict[str, Any], stored: bool
) -> tuple[StreamTracker, ReferenceStreamTracker]:
    native_store, reference_store = (DictStore(), DictStore()) if stored else (None, None)
    native = StreamTracker(**options, forgotten=native_store)
    reference = ReferenceStreamTracker(**options, forgotten=reference_store)
    feed = Feed()
    for step in steps:
        if step[0] == "forget":
            native.forget_partitions(set(step[1]))
            reference.forget_partitions(set(step[1]))
        elif step[0] == "pickle":
            # Bytes this test just wrote: nothing untrusted is unpickled.
            native = pickle.loads(pickle.dumps(native))  # noqa: S301
            if stored:  # the store went with it (a copy): keep comparing the same ids
                native_store = native._settings()["forgotten"]
        else:
            m = feed.message(step)
            if m is None:
                continue
            got = native.observe(m.event, m.value, partition=m.partition, offset=m.offset)
            want = reference.observe(m.event, m.value, partition=m.partition, offset=m.offset)
            assert result_fields(got) == result_fields(want), (m, got, want)
            assert native.new_turns == reference.new_turns
            assert native.currently_missing == reference.currently_missing
    if stored:
        assert native_store is not None
        assert reference_store is not None
        assert native_store.kept == reference_store.kept
    return native, reference


@settings(max_examples=200, deadline=None)
@given(st.lists(message_steps, min_size=30, max_size=150), bounds, st.booleans())
def test_every_message_is_placed_as_the_reference_places_it(
    steps: list[tuple[Any, ...]], options: dict[str, Any], stored: bool
) -> None:
    native, reference = run_both(steps, options, stored)
    assert tables(native) == tables(reference)
    # The per-stream view verify's crash check reads: each lookup as the table says.
    view, last = native.last_position_of(), reference.last_positions()
    assert view == last
    assert all(view[stream] == position for stream, position in last.items())
    assert view.get(("never", "seen")) is None
    # The report's list: chained streams' heads, sorted by stream.
    assert native.chained_heads() == sorted(
        (session, producer, position, digest)
        for (session, producer), (position, digest) in reference.heads().items()
        if producer
    )
    # One stream's head, as the anchors check asks for it: each as the table says.
    heads = reference.heads()
    assert all(native.head(*stream) == head for stream, head in heads.items())
    assert all(native.head(*stream) is None for stream in last if stream not in heads)
    assert native.head("never", "seen") is None
    # The report's stream counts: every stream the table holds, chained and legacy.
    legacy = sum(1 for _, producer in last if not producer)
    assert native.stream_counts() == (len(last) - legacy, legacy)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(message_steps, min_size=5, max_size=60),
    st.lists(message_steps, min_size=5, max_size=60),
    bounds,
)
def test_two_trackers_merged_as_the_reference_merges_them(
    first: list[tuple[Any, ...]], second: list[tuple[Any, ...]], options: dict[str, Any]
) -> None:
    wide = {**options, "max_streams": 1_000, "max_event_ids": 1_000}
    native_a, reference_a = run_both(first, wide, False)
    native_b, reference_b = run_both(second, wide, False)
    native_a.absorb(native_b)
    reference_a.absorb(reference_b)
    assert tables(native_a) == tables(reference_a)
    assert native_a.hand_over_ids() == reference_a.hand_over_ids()
    assert len(native_a.remembered()) == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_the_chain_hash_is_the_python_one(value: bytes) -> None:
    assert chain_hash_hex(value) == chain_hash(value)
    for frame in FRAMES:
        assert chain_hash_hex(frame + value) == chain_hash(frame + value)


def test_an_event_that_is_not_a_turn_event_raises_as_the_reference_does() -> None:
    for event in (
        {},
        {"session_id": "s"},
        {"session_id": "s", "sequence": "x", "event_id": "e"},
        {"session_id": "s", "sequence": None, "event_id": "e"},
    ):
        raised = []
        for tracker in (StreamTracker(), ReferenceStreamTracker()):
            try:
                tracker.observe(event, b"v")
            except (KeyError, TypeError, ValueError) as exc:
                raised.append(type(exc))
        assert len(raised) == 2, (event, raised)
        assert raised[0] is raised[1], (event, raised)


def test_the_remembered_view_reads_the_live_table() -> None:
    tracker = StreamTracker()
    view = tracker.remembered()
    assert len(view) == 0
    assert "e-0-0-0" not in view
    tracker.observe(
        {
            "session_id": "s",
            "event_id": "e-0-0-0",
            "sequence": 0,
            "producer_id": "p",
            "prev_hash": GENESIS_HASH,
        },
        b"v",
        partition=0,
        offset=7,
    )
    assert list(view) == ["e-0-0-0"]
    assert view["e-0-0-0"] == (chain_hash(b"v")[:16], 0, 7)
    assert view.get("other") is None
    assert 3 not in view  # type: ignore[comparison-overlap]  # a wrong key type on purpose
