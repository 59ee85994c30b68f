"""The hand-back of a purge goes to the spool in stream order, whatever order
librdkafka reported it in."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from tests.support.events import encode, turn
from turnaudit.producers.ordering import (
    UNREADABLE,
    TurnFacts,
    in_stream_order,
    record_timestamp,
    shipped_position_reader,
    shipped_turn_reader,
)
from turnaudit.producers.spool import SpooledMessage

TOPIC = "t.turn-events"


@dataclass(frozen=True)
class Msg:
    topic: str
    key: bytes
    value: bytes


def position(value: bytes) -> int | None:
    return None if value.startswith(b"?") else int(value.split(b":")[1])


@st.composite
def handbacks(draw: st.DrawFn) -> list[Msg]:
    """Streams of consecutive positions, reported as any interleaving, plus dead letters."""
    streams = draw(st.lists(st.integers(1, 8), min_size=1, max_size=6))
    messages = [
        Msg(TOPIC, f"s{k}".encode(), f"{k}:{p}".encode())
        for k, n in enumerate(streams)
        for p in range(n)
    ]
    letters = draw(st.integers(0, 3))
    messages += [Msg(f"{TOPIC}.dlq", b"s0", f"letter:{i}".encode()) for i in range(letters)]
    return draw(st.permutations(messages))


@given(handbacks())
def test_each_stream_comes_out_in_position_order_in_the_slots_it_held(reported: list[Msg]) -> None:
    ordered = in_stream_order(reported, TOPIC, position)
    assert sorted(ordered, key=repr) == sorted(reported, key=repr)  # nothing lost or added
    for key in {m.key for m in reported}:
        mine = [m for m in ordered if m.topic == TOPIC and m.key == key]
        assert [position(m.value) for m in mine] == sorted(position(m.value) or 0 for m in mine)
    for i, (before, after) in enumerate(zip(reported, ordered, strict=True)):
        assert before.key == after.key or before.topic != TOPIC, i  # slots keep their key
        if before.topic != TOPIC:
            assert after is before  # dead letters stay where they were


@given(handbacks(), st.data())
def test_a_stream_with_an_unreadable_position_is_kept_as_reported(
    reported: list[Msg], data: st.DataObject
) -> None:
    turns = [i for i, m in enumerate(reported) if m.topic == TOPIC]
    broken = data.draw(st.sampled_from(turns))
    bad = reported[broken]
    reported = [*reported[:broken], Msg(TOPIC, bad.key, b"?" + bad.value), *reported[broken + 1 :]]
    ordered = in_stream_order(reported, TOPIC, position)
    assert [m for m in ordered if m.key == bad.key and m.topic == TOPIC] == [
        m for m in reported if m.key == bad.key and m.topic == TOPIC
    ]


@given(st.sampled_from([3, 4]))
def test_the_shipped_reader_reads_the_position_of_the_publisher_s_bytes(version: int) -> None:
    read = shipped_position_reader()
    values = [encode(turn("s-1", n, version=version)) for n in range(5)]
    assert [read(v) for v in values] == list(range(5))
    assert read(b"not a turn") is None
    spooled = [SpooledMessage(TOPIC, b"k", v) for v in reversed(values)]
    assert [read(m.value) for m in in_stream_order(spooled, TOPIC, read)] == list(range(5))


class TestEventTime:
    @given(st.sampled_from([1, 2, 3, 4]), st.integers(1, 4_102_444_800_000))
    def test_one_decode_gives_position_and_occurred_at(self, version: int, millis: int) -> None:
        read = shipped_turn_reader()
        facts = read(encode(turn("s-1", 7, version=version) | {"occurred_at": millis}))
        assert facts == TurnFacts(7, millis)

    @given(st.binary(max_size=64))
    def test_what_cannot_be_read_is_produced_at_the_produce_time(self, raw: bytes) -> None:
        # Registry framing (magic byte 0, schema id) or anything else: timestamp 0 = now.
        framed = b"\x00\x00\x00\x00\x01" + raw
        assert shipped_turn_reader()(framed) == UNREADABLE
        assert UNREADABLE.occurred_at == 0

    @given(st.integers(-(10**13), 10**13), st.integers(1, 10**13))
    def test_the_record_timestamp_is_occurred_at_never_after_now(
        self, occurred: int, now: int
    ) -> None:
        stamp = record_timestamp(occurred, now)
        if occurred <= 0:
            assert stamp == 0  # no usable event time: the broker stamps the produce time
        elif occurred <= now:
            assert stamp == occurred
        else:
            assert stamp == now  # a clock ahead of ours: brokers refuse the far future
