"""The follower admits a batch natively (``VerifyStep.admit``): for any messages (any
partitions, offsets going back and forth, no partition or offset at all, any
timestamps) it keeps what its former Python loop kept, in order, and moves each
partition's offset, event time and counts as that loop did."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnaudit.serialization.native import VerifyStep


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
