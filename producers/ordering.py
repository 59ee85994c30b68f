"""Messages taken back from librdkafka, put in stream order before they are spooled.

librdkafka reports a purge in no promised order: messages still queued and
messages in flight (or waiting for a retry) come back as separate groups, so a
stream's later turns can be handed back before its earlier ones. The spool
drains in the order it is given, so the hand-back is sorted first: each key's
messages are ordered by their stream position and put back into the slots that
key held (other keys' slots, and messages whose position cannot be read, stay
where they were). Pure: the position reader is passed in.

The same one decode gives a spooled turn's ``occurred_at``: a drained turn is
produced with it as its record timestamp, as ``publish()`` would have.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from turnaudit.errors import SerializationError
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer


class Keyed(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...


M = TypeVar("M", bound=Keyed)


def in_stream_order(
    messages: Sequence[M], topic: str, position: Callable[[bytes], int | None]
) -> list[M]:
    """``messages`` with each key's turns on ``topic`` in position order."""
    slots: defaultdict[bytes, list[int]] = defaultdict(list)
    for index, message in enumerate(messages):
        if message.topic == topic:
            slots[message.key].append(index)
    ordered = list(messages)
    for indices in slots.values():
        if len(indices) < 2:
            continue
        positions = [position(messages[i].value) for i in indices]
        known = [p for p in positions if p is not None]
        if len(known) != len(positions):
            continue  # a turn that does not say its position: keep the order as reported
        by_position = sorted(zip(known, indices, strict=True))
        for slot, (_, index) in zip(indices, by_position, strict=True):
            ordered[slot] = messages[index]
    return ordered


class TurnFacts(NamedTuple):
    """What the spool's routing reads from a turn's bytes."""

    position: int | None  # its stream position; None: unreadable, kept as reported
    occurred_at: int  # epoch ms; 0: unreadable, the broker stamps the produce time


UNREADABLE = TurnFacts(None, 0)


def shipped_turn_reader() -> Callable[[bytes], TurnFacts]:
    """A turn's stream position and ``occurred_at``, in one decode, for a turn written
    in a shipped schema version with the project's single-object framing. Anything
    else (schema-registry framing, a schema this build does not ship) is
    ``UNREADABLE``: kept in the order reported, and re-produced with timestamp 0, so
    its record takes the produce time, as before event-time stamping."""
    decode = TurnEventDeserializer(shipped_catalog("turn_event"))

    def read(value: bytes) -> TurnFacts:
        try:
            event = decode(value).event
        except SerializationError:
            return UNREADABLE
        sequence, occurred = event.get("sequence"), event.get("occurred_at")
        return TurnFacts(
            sequence if isinstance(sequence, int) and sequence >= 0 else None,
            occurred if isinstance(occurred, int) and occurred > 0 else 0,
        )

    return read


def shipped_position_reader() -> Callable[[bytes], int | None]:
    """The stream position alone (``shipped_turn_reader``), for ``in_stream_order``."""
    read = shipped_turn_reader()
    return lambda value: read(value).position


def record_timestamp(occurred_at: int, now_ms: int) -> int:
    """The Kafka timestamp a turn is produced with: its ``occurred_at``, so broker-time
    ranges and time retention follow event time, but never later than now (a broker
    refuses records too far in its future, ``log.message.timestamp.after.max.ms``:
    a runtime clock ahead of the publisher's must not cost a turn), and 0 (the
    produce time) for what has no usable ``occurred_at``."""
    return min(occurred_at, now_ms) if occurred_at > 0 else 0
