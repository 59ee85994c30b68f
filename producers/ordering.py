"""Messages taken back from librdkafka, put in stream order before they are spooled.

librdkafka reports a purge in no promised order: messages still queued and
messages in flight (or waiting for a retry) come back as separate groups, so a
stream's later turns can be handed back before its earlier ones. The spool
drains in the order it is given, so the hand-back is sorted first: each key's
messages are ordered by their stream position and put back into the slots that
key held (other keys' slots, and messages whose position cannot be read, stay
where they were). Pure: the position reader is passed in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

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


def shipped_position_reader() -> Callable[[bytes], int | None]:
    """The stream position of a turn written in a shipped schema version with the
    project's single-object framing (None for anything else: kept as reported)."""
    decode = TurnEventDeserializer(shipped_catalog("turn_event"))

    def position(value: bytes) -> int | None:
        try:
            event = decode(value).event
        except SerializationError:
            return None
        sequence = event.get("sequence")
        return sequence if isinstance(sequence, int) and sequence >= 0 else None

    return position
