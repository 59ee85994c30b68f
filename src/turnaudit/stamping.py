"""The producer side of turn identity: event ids, and ``TurnStamper``, which gives each
event its stream position and the chain hash of its predecessor (``turnaudit.identity``)."""

from __future__ import annotations

import itertools
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from turnaudit.chain import GENESIS_HASH, LEGACY_PRODUCER, chain_hash

if TYPE_CHECKING:
    from turnaudit.events import OutgoingTurnEvent


class EventIds:
    """Unique event ids, cheaper than uuid4 per event: 80 random bits chosen
    once per instance, then a counter (32 hex digits, like a UUID)."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:20]
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):012x}"


@dataclass(slots=True)
class _ProducerStream:
    producer_id: str
    next_sequence: int = 0
    last_hash: str = GENESIS_HASH


class TurnStamper:
    """Assigns event id, producer id, stream position and predecessor hash.

    Call ``stamp`` before encoding (it writes the identity fields into the
    event it is given: the publisher gives it its own copy, never the
    runtime's) and ``commit`` with the encoded bytes once they are handed on
    (Kafka or the spool); an event whose encoding failed never used up a
    position. Not thread-safe: the publisher calls it under its lock, which
    also keeps a stream's positions in hand-over order.

    Memory: one entry per session, at most ``max_sessions`` (least recently
    stamped evicted). A session stamped again after its eviction continues in
    a new ordered stream (a producer id with a generation suffix), so no
    position is ever reused.
    """

    def __init__(
        self,
        *,
        producer_id: str | None = None,
        id_factory: Callable[[], str] | None = None,
        max_sessions: int = 1_000_000,
    ) -> None:
        self.producer_id = producer_id or str(uuid.uuid4())
        self._new_id = id_factory or EventIds().next
        self._max_sessions = max_sessions
        # Least recently stamped first; the oldest is dropped in O(1) at the bound.
        self._streams: OrderedDict[tuple[str, bool], _ProducerStream] = OrderedDict()
        self._generation = 0
        self._current_producer = self.producer_id
        self._stamped: tuple[OutgoingTurnEvent, tuple[str, bool], _ProducerStream | None] | None
        self._stamped = None
        self.published = 0
        # Written into turns that carry it (v5 on): how often the publisher announces its
        # liveness on <prefix>stream-heads (None until the publisher says).
        self.liveness_interval_ms: int | None = None

    def stamp(self, event: OutgoingTurnEvent) -> str:
        """Write the identity into ``event`` (event id, producer id, position,
        predecessor hash); returns the event id."""
        key = _stamp_key(event)
        stream = self._streams.get(key)
        known = stream is not None
        if stream is None:
            stream = _ProducerStream(LEGACY_PRODUCER if key[1] else self._current_producer)
        # What ``commit`` of this same event needs again: not looked up twice per turn.
        self._stamped = (event, key, stream if known else None)
        event["event_id"] = event_id = self._new_id()
        event["producer_id"] = stream.producer_id
        event["sequence"] = stream.next_sequence
        event["prev_hash"] = "" if key[1] else stream.last_hash
        if "liveness_interval_ms" in event:
            event["liveness_interval_ms"] = self.liveness_interval_ms
        return event_id

    def commit(
        self, event: OutgoingTurnEvent, value: bytes, fingerprint: bytes | None = None
    ) -> str:
        """The stamped ``event`` was handed on, encoded as ``value`` with the writer
        schema of ``fingerprint`` (None: the one its single-object header names);
        returns its chain hash (the stream's new head)."""
        last = self._stamped
        if last is not None and last[0] is event:
            key, stream = last[1], last[2]
        else:
            key = _stamp_key(event)
            stream = self._streams.get(key)
        self._stamped = None
        if stream is None:
            stream = self._streams[key] = _ProducerStream(event["producer_id"])
        else:
            self._streams.move_to_end(key)  # most recently stamped last
        stream.next_sequence = event["sequence"] + 1
        stream.last_hash = chain_hash(value, fingerprint)
        self.published += 1
        if len(self._streams) > self._max_sessions:
            self._streams.popitem(last=False)
            self._generation += 1
            self._current_producer = f"{self.producer_id}.{self._generation}"
        return stream.last_hash

    def new_event_id(self) -> str:
        return self._new_id()


def _stamp_key(event: OutgoingTurnEvent) -> tuple[str, bool]:
    """(session, legacy): v1/v2 events (no identity fields in their schema) are
    numbered apart from the session's v3 stream, which must start at 0."""
    verdicts = event.get("verdicts")
    return (event["session_id"], verdicts is not None and verdicts["schema_version"] < 3)
