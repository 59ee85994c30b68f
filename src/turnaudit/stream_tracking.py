"""The consumer side of turn identity: ``StreamTracker`` places each consumed event in its
ordered stream (dedupe, gaps, late arrivals, chain checks) and says what it is
(``TurnOutcome``, ``TrackResult``); shared by the services and ``turnaudit verify``.

The tracker's tables and per-message step are native (``NativeStreamTracker``, the
crate in ``native/``): a message costs a fraction of what the same step costs in
Python. The differential tests hold it to the same rules written plainly in Python
(``ReferenceStreamTracker``, a test oracle in ``tests/support/reference_tracker.py``)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from turnaudit.chain import StreamId
from turnaudit.serialization.native import NativeStreamTracker


class TurnOutcome(enum.StrEnum):
    """What one message is, for the ordered stream it belongs to."""

    NEW = "new"  # a turn seen for the first time, in order (or opening a gap)
    LATE = "late"  # a turn seen for the first time, filling a gap: it arrived late
    REDELIVERY = "redelivery"  # the same message read again (at-least-once)
    DUPLICATE = "duplicate"  # the same event, a second copy at another offset
    CONTENT_CHANGED = "content_changed"  # breach: a known event id with other content
    POSITION_REUSED = "position_reused"  # breach: another event at a taken position


COUNTED = frozenset({TurnOutcome.NEW, TurnOutcome.LATE})


class Placement(Protocol):
    """What a sink needs to know about a consumed turn's identity."""

    @property
    def counts_as_turn(self) -> bool: ...  # a turn not counted before (new or late)

    @property
    def redelivered(self) -> bool: ...  # the same event again


BREACHES = frozenset({TurnOutcome.CONTENT_CHANGED, TurnOutcome.POSITION_REUSED})
REDELIVERED = frozenset({TurnOutcome.REDELIVERY, TurnOutcome.DUPLICATE})


class TrackResult(NamedTuple):
    # A named tuple: built once per consumed message, cheaper than a frozen dataclass.
    outcome: TurnOutcome
    stream: StreamId
    sequence: int
    missing_opened: int = 0  # positions a gap skipped (at the start or in the middle)
    gap_closed: bool = False  # a late arrival filled a missing position
    chain_break: str | None = None  # what did not chain, with the positions

    @property
    def counts_as_turn(self) -> bool:
        return self.outcome in COUNTED

    @property
    def redelivered(self) -> bool:
        return self.outcome in REDELIVERED


# What dedupe remembers of an event id: 16 hex digits of its chain hash (64 bits tell
# changed content apart), and where it was first read.
Seen = tuple[str, int | None, int | None]
SEEN_DIGITS = 16


class ForgottenIds(Protocol):
    """Where a tracker puts the event ids its dedupe bound drops, and asks for them again.

    With one, an event id beyond the bound is recalled exactly (verify's spill to disk);
    without, it is forgotten and an unknown id at a taken position is guessed to be an
    old redelivery (the services). Ids are handed over ``forget_batch`` at a time, oldest
    first; ``recall`` answers for ids given to ``keep_many``: a tracker does not ask
    about an id it never handed over."""

    def keep_many(self, dropped: list[tuple[str, Seen]]) -> None: ...

    def recall(self, event_id: str) -> Seen | None: ...


# The outcomes in the order the native tracker indexes them.
_OUTCOMES = (
    TurnOutcome.NEW,
    TurnOutcome.LATE,
    TurnOutcome.REDELIVERY,
    TurnOutcome.DUPLICATE,
    TurnOutcome.CONTENT_CHANGED,
    TurnOutcome.POSITION_REUSED,
)


class StreamTracker(NativeStreamTracker):
    """Dedupe by event id, gaps and late arrivals per ordered stream, the chain.

    ``observe`` places one consumed event (its decoded record and its stored bytes) and
    returns a ``TrackResult``:

    * a known event id is a redelivery (same partition and offset, or no place given),
      a duplicate copy (another place) or changed content (another chain hash);
    * a new id at a stream's next position is new; past it, new and a gap opens (also
      at the start of a stream first seen in a partition read from its log start);
      at a missing position, late (the gap closes); at a taken position, a reused
      position (a breach), or, once ids were forgotten without a store, an old
      redelivery;
    * in a chained stream (v3 and later) each turn's ``prev_hash`` must be its
      predecessor's chain hash (genesis at position 0), and a late arrival must be the
      turn its successor named: otherwise ``chain_break`` says what did not chain.
      v1/v2 events (no producer id) form one legacy stream per session, deduplicated
      by id, gaps reported, no chain, a lower number with a new id a new turn.

    ``tests/support/reference_tracker.py`` writes the same rules out in Python, line by
    line; the differential tests hold this class to it.

    Memory bounds (stated, enforced):

    * ``max_event_ids`` event ids remembered for dedupe (oldest forgotten first, down to
      the bound once it is exceeded by ``forget_batch``: up to ``max_event_ids +
      forget_batch - 1`` ids are held; one at a time by default). Within
      the bound an unknown event id at a position already taken is a breach
      (``POSITION_REUSED``); once ids were forgotten it is taken for an old redelivery
      (counted in ``forgotten_event_ids``), unless a ``forgotten`` store keeps the
      dropped ids: then they are recalled from it, exactly.
    * ``max_streams`` ordered streams in memory (least recently seen forgotten; or,
      with a ``stream_spill``, written ``stream_batch`` at a time to the SQLite file at
      the path it returns when first needed, exactly, and read back when the stream
      comes back: verify's, whose memory is then bounded by ``max_streams``).
    * ``max_missing`` missing positions remembered per stream; beyond that a gap is
      counted but a late arrival into it is not recognised.

    Counters (``new_turns``, ``currently_missing``, ``forgotten_event_ids``) may be
    read from any thread at any time (a metrics scrape); the tables are for one thread.
    """

    __slots__ = ()

    def __new__(
        cls,
        *,
        max_event_ids: int = 500_000,
        max_streams: int = 100_000,
        max_missing: int = 1_000,
        log_start_offsets: Mapping[int, int] | None = None,
        start_gaps: bool = True,
        forgotten: ForgottenIds | None = None,
        forget_batch: int = 1,
        stream_spill: Callable[[], str] | None = None,
        stream_batch: int = 4096,
    ) -> StreamTracker:
        return super().__new__(
            cls,
            _OUTCOMES,
            TrackResult,
            max_event_ids=max_event_ids,
            max_streams=max_streams,
            max_missing=max_missing,
            log_start_offsets=dict(log_start_offsets or {}),
            start_gaps=start_gaps,
            forgotten=forgotten,
            forget_batch=forget_batch,
            stream_spill=stream_spill,
            stream_batch=stream_batch,
        )

    def remembered(self) -> Mapping[str, Seen]:
        """The counted event ids still in memory (the forgotten ones are not): a live
        read-only view."""
        return RememberedIds(self)

    def last_position_of(self) -> Mapping[StreamId, int]:
        """Each stream's highest position seen, as a read-only view that looks a stream
        up when asked (``last_positions()`` builds the whole table)."""
        return LastPositions(self)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any], bytes]]:
        # verify --jobs sends a job's tracker back to the merging process.
        return (_rebuilt, (self._settings(), self._state()))


def _rebuilt(settings: dict[str, Any], state: bytes) -> StreamTracker:
    tracker = StreamTracker(**settings)
    tracker._restore(state)
    return tracker


class RememberedIds(Mapping[str, Seen]):
    """A read-only view of a tracker's event ids in memory, in arrival order."""

    __slots__ = ("_tracker",)

    def __init__(self, tracker: StreamTracker) -> None:
        self._tracker = tracker

    def __getitem__(self, event_id: str) -> Seen:
        seen = self._tracker.remembered_get(event_id) if isinstance(event_id, str) else None
        if seen is None:
            raise KeyError(event_id)
        return seen

    def __contains__(self, event_id: object) -> bool:
        return isinstance(event_id, str) and self._tracker.remembered_get(event_id) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tracker.remembered_keys())

    def __len__(self) -> int:
        return self._tracker.remembered_len()


class LastPositions(Mapping[StreamId, int]):
    """A read-only view of a tracker's last position per stream, looked up per stream."""

    __slots__ = ("_tracker",)

    def __init__(self, tracker: StreamTracker) -> None:
        self._tracker = tracker

    def __getitem__(self, stream: StreamId) -> int:
        position = None
        if isinstance(stream, tuple) and len(stream) == 2:
            position = self._tracker.last_position(*stream)
        if position is None:
            raise KeyError(stream)
        return position

    def __iter__(self) -> Iterator[StreamId]:
        return iter(self._tracker.last_positions())

    def __len__(self) -> int:
        return len(self._tracker.last_positions())
