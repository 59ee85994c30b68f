"""``ReferenceStreamTracker``: the stream tracker's rules in plain Python, a test oracle.

The project has one stream tracker, ``turnaudit.stream_tracking.StreamTracker`` (native
tables, used by every consumer and ``verify``). This class is not part of the package:
it states the same rules readably, and the differential property tests
(``tests/unit/test_stream_tracker_native.py``) feed both the same messages and require
the same result for every message and the same tables after."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from turnaudit.chain import GENESIS_HASH, LEGACY_PRODUCER, StreamId, chain_hash, describe_stream
from turnaudit.stream_tracking import (
    COUNTED,
    SEEN_DIGITS,
    ForgottenIds,
    Seen,
    TrackResult,
    TurnOutcome,
)

_tuple_new = tuple.__new__
_NEW = TurnOutcome.NEW


_NO_GAP: frozenset[int] = frozenset()


@dataclass(slots=True)
class _Stream:
    partition: int | None
    next: int = 0  # one past the highest position seen
    # Missing positions: a set of its own only while the stream has a gap. Most
    # streams never do, and a set per stream was half of what the garbage
    # collector walked through in a full tracker.
    missing: AbstractSet[int] = _NO_GAP
    untracked_missing: int = 0  # skipped beyond the per-stream bound
    # Own hash of events whose successor is not seen yet (the head, left edges of holes).
    own: dict[int, str] = field(default_factory=dict)
    # prev_hash claimed by the successor of a missing position.
    claimed: dict[int, str] = field(default_factory=dict)

    def add_missing(self, positions: range) -> None:
        missing = self.missing if isinstance(self.missing, set) else set()
        missing.update(positions)
        self.missing = missing

    def fill(self, position: int) -> None:
        if isinstance(self.missing, set):
            self.missing.discard(position)
            if not self.missing:
                self.missing = _NO_GAP


class ReferenceStreamTracker:
    """``StreamTracker`` in plain Python: the reference the native tracker is held to,
    message for message (the differential tests), and the statement of its rules.

    Dedupe by event id, gaps and late arrivals per ordered stream, the chain.

    Memory bounds (stated, enforced):

    * ``max_event_ids`` event ids remembered for dedupe (oldest forgotten first;
      a tracker at both default bounds, 500,000 ids and 100,000 streams, holds
      about 190 MiB). Within
      the bound an unknown event id at a position already taken is a breach
      (``POSITION_REUSED``); once ids were forgotten it is taken for an old
      redelivery (counted in ``forgotten_event_ids``), unless a ``forgotten``
      store keeps the dropped ids: then they are recalled from it, exactly.
    * ``max_streams`` ordered streams (least recently seen forgotten).
    * ``max_missing`` missing positions remembered per stream; beyond that a
      gap is counted but a late arrival into it is not recognised.

    A stream first seen in a partition that was read from its log start must
    begin at position 0, so a gap at the start of a stream is a gap. Where a
    consumer resumed mid-log, a stream first seen there starts where it is
    (its earlier positions were read by whoever read before); so does every
    stream with ``start_gaps=False`` (an event-time window: a stream's
    earlier turns happened before the window, wherever they are stored).
    v1/v2 events (no producer id) form one legacy stream per session whose
    numbers restart with each publisher: they are deduped by event id, their
    gaps are reported, but a lower number with a new event id is a new turn.
    """

    def __init__(
        self,
        *,
        max_event_ids: int = 500_000,
        max_streams: int = 100_000,
        max_missing: int = 1_000,
        log_start_offsets: Mapping[int, int] | None = None,
        start_gaps: bool = True,
        forgotten: ForgottenIds | None = None,
        forget_batch: int = 1,
    ) -> None:
        if forget_batch < 1:
            raise ValueError(f"ids are forgotten 1 or more at a time, not {forget_batch}")
        self._forget_batch = forget_batch
        # Bounded tables evict their oldest entry in O(1): ids in arrival order
        # beside their dict, streams in an OrderedDict (least recently seen
        # first). A dict's first key, once many were deleted before it, costs a
        # scan over their dummy slots: at the bounds that made each message
        # cost about 100 µs more.
        self._seen: dict[str, Seen] = {}
        self._seen_order: deque[str] = deque()
        self._streams: OrderedDict[StreamId, _Stream] = OrderedDict()
        self._max_event_ids = max_event_ids
        self._max_streams = max_streams
        self._max_missing = max_missing
        self._log_start = dict(log_start_offsets or {})
        self._start_gaps = start_gaps
        self._forgotten = forgotten
        self._first_offset: dict[int, int] = {}
        self.currently_missing = 0
        self.new_turns = 0  # messages that counted as a turn (new or late)
        self.forgotten_event_ids = 0  # event ids dropped by the dedupe bound

    # -- the per-message step ------------------------------------------------------
    def observe(
        self,
        event: Mapping[str, Any],
        value: bytes,
        *,
        partition: int | None = None,
        offset: int | None = None,
        fingerprint: bytes | None = None,
    ) -> TrackResult:
        content = chain_hash(value, fingerprint)
        stream_id = (event["session_id"], event.get("producer_id") or LEGACY_PRODUCER)
        sequence = event["sequence"]
        if type(sequence) is not int:
            sequence = int(sequence)
        event_id = event["event_id"]
        seen = self._seen.get(event_id)
        if seen is None and self._forgotten is not None and self.forgotten_event_ids:
            seen = self._forgotten.recall(event_id)
        if seen is not None:
            if seen[0] != content[:SEEN_DIGITS]:
                return TrackResult(TurnOutcome.CONTENT_CHANGED, stream_id, sequence)
            same_place = seen[2] is None or (seen[1], seen[2]) == (partition, offset)
            outcome = TurnOutcome.REDELIVERY if same_place else TurnOutcome.DUPLICATE
            return TrackResult(outcome, stream_id, sequence)
        if partition is not None and offset is not None and partition not in self._first_offset:
            self._first_offset[partition] = offset
        streams = self._streams
        stream = streams.get(stream_id)
        if stream is not None:
            streams.move_to_end(stream_id)  # most recently seen last
        if stream is not None and sequence == stream.next:
            # The common case, a known stream's next position: no gap can open,
            # no gap closes, and no successor has claimed this position yet
            # (claims are made below a stream's next); only the link to the
            # predecessor is checked.
            if stream_id[1] != LEGACY_PRODUCER:
                own = stream.own
                expected = own.pop(sequence - 1, None)
                if expected is not None and expected != (event.get("prev_hash") or ""):
                    own[sequence - 1] = expected  # the general path reports it
                    result = self._place(
                        event, content, stream_id, sequence, partition, stream=stream
                    )
                    return self._placed(event_id, partition, offset, result, content)
                own[sequence] = content
            stream.next = sequence + 1
            # A named tuple built without its Python-level __new__ (one per message).
            result = _tuple_new(TrackResult, (_NEW, stream_id, sequence, 0, False, None))
        else:
            result = self._place(event, content, stream_id, sequence, partition, stream=stream)
        return self._placed(event_id, partition, offset, result, content)

    def _placed(
        self,
        event_id: str,
        partition: int | None,
        offset: int | None,
        result: TrackResult,
        content: str,
    ) -> TrackResult:
        """Counts a new or late turn, remembers its id (and bounds the memory)."""
        if result[0] in COUNTED:
            self.new_turns += 1
            self._seen[event_id] = (content[:SEEN_DIGITS], partition, offset)
            self._seen_order.append(event_id)
            if len(self._seen) > self._max_event_ids + self._forget_batch - 1:
                dropped: list[tuple[str, Seen]] = []
                while len(self._seen) > self._max_event_ids:
                    oldest = self._seen_order.popleft()
                    dropped.append((oldest, self._seen.pop(oldest)))
                self.forgotten_event_ids += len(dropped)
                if self._forgotten is not None:
                    self._forgotten.keep_many(dropped)
        if len(self._streams) > self._max_streams:
            self._drop(next(iter(self._streams)))  # an OrderedDict's first: O(1)
        return result

    def _place(
        self,
        event: Mapping[str, Any],
        content: str,
        stream_id: StreamId,
        sequence: int,
        partition: int | None,
        *,
        stream: _Stream | None,
    ) -> TrackResult:
        legacy = stream_id[1] == LEGACY_PRODUCER
        opened = 0
        if stream is None:
            stream = _Stream(partition)
            if sequence > 0 and self._from_log_start(partition):
                opened = self._open_gap(stream, 0, sequence)  # a gap at the start
            stream.next = sequence
            self._streams[stream_id] = stream  # most recently seen last
        chain_break = (
            None if legacy else self._check_chain(stream, stream_id, event, content, sequence)
        )
        if sequence >= stream.next:
            opened += self._open_gap(stream, stream.next, sequence)
            if not legacy:
                stream.own.pop(sequence - 1, None)
                stream.own[sequence] = content
            stream.next = sequence + 1
            return TrackResult(TurnOutcome.NEW, stream_id, sequence, opened, False, chain_break)
        if sequence in stream.missing:
            stream.fill(sequence)
            self.currently_missing -= 1
            if not legacy:
                stream.own.pop(sequence - 1, None)
                if sequence + 1 in stream.missing:
                    stream.own[sequence] = content
            return TrackResult(TurnOutcome.LATE, stream_id, sequence, 0, True, chain_break)
        if legacy:
            # v1/v2: another publisher numbering the session again.
            return TrackResult(TurnOutcome.NEW, stream_id, sequence)
        if (
            self.forgotten_event_ids
            and self._forgotten is None
            and stream.own.get(sequence, content) == content
        ):
            # Beyond the dedupe bound an old redelivery looks like this: its id
            # was forgotten, its position is seen. Within the bound (or with the
            # forgotten ids kept elsewhere and recalled) it cannot be.
            return TrackResult(TurnOutcome.REDELIVERY, stream_id, sequence)
        return TrackResult(
            TurnOutcome.POSITION_REUSED,
            stream_id,
            sequence,
            chain_break=f"position {sequence} of {describe_stream(stream_id)} is already taken "
            f"by another event",
        )

    def _check_chain(
        self,
        stream: _Stream,
        stream_id: StreamId,
        event: Mapping[str, Any],
        content: str,
        sequence: int,
    ) -> str | None:
        prev = event.get("prev_hash") or ""
        problems: list[str] = []
        if sequence == 0:
            if prev != GENESIS_HASH:
                problems.append("position 0 does not start the chain (prev_hash is not genesis)")
        else:
            expected = stream.own.get(sequence - 1)
            if expected is not None and expected != prev:
                problems.append(f"prev_hash does not match position {sequence - 1}'s hash")
        if sequence > stream.next or sequence - 1 in stream.missing:
            stream.claimed[sequence - 1] = prev
        claimed = stream.claimed.pop(sequence, None)
        if claimed is not None and claimed != content:
            problems.append(f"position {sequence + 1} names another predecessor hash")
        if not problems:
            return None
        return f"{describe_stream(stream_id)}, position {sequence}: " + "; ".join(problems)

    def _open_gap(self, stream: _Stream, start: int, end: int) -> int:
        skipped = end - start
        if skipped <= 0:
            return 0
        room = max(0, self._max_missing - len(stream.missing))
        if room:
            stream.add_missing(range(start, start + min(room, skipped)))
        stream.untracked_missing += max(0, skipped - room)
        self.currently_missing += min(room, skipped)
        return skipped

    def _from_log_start(self, partition: int | None) -> bool:
        if partition is None or not self._start_gaps:
            return False
        return self._first_offset.get(partition) == self._log_start.get(partition, 0)

    def _drop(self, stream_id: StreamId) -> None:
        stream = self._streams.pop(stream_id)
        self.currently_missing -= len(stream.missing)

    def forget_partitions(self, partitions: set[int]) -> None:
        """Forget streams read from these partitions (another consumer reads them now)."""
        for stream_id in [s for s, st in self._streams.items() if st.partition in partitions]:
            self._drop(stream_id)
        for partition in partitions:
            self._first_offset.pop(partition, None)

    # -- what is open --------------------------------------------------------------
    def missing(self) -> dict[StreamId, list[int]]:
        """Positions still missing, per stream (tracked ones)."""
        return {s: sorted(st.missing) for s, st in self._streams.items() if st.missing}

    def untracked_missing(self) -> int:
        return sum(st.untracked_missing for st in self._streams.values())

    def head(self, session_id: str, producer_id: str) -> tuple[int, str] | None:
        """One stream's entry of ``heads()``."""
        return self.heads().get((session_id, producer_id))

    def heads(self) -> dict[StreamId, tuple[int, str]]:
        """Each stream's highest position and its chain hash (an anchor to keep)."""
        return {
            s: (st.next - 1, st.own[st.next - 1])
            for s, st in self._streams.items()
            if st.next - 1 in st.own
        }

    def last_positions(self) -> dict[StreamId, int]:
        """Each stream's highest position seen (whether or not its hash is still kept)."""
        return {s: st.next - 1 for s, st in self._streams.items() if st.next > 0}

    def remembered(self) -> Mapping[str, Seen]:
        """The counted event ids still in memory (the forgotten ones are not)."""
        return self._seen

    def hand_over_ids(self) -> dict[str, Seen]:
        """The ids in memory, forgotten here (``verify --jobs`` sends them on by file)."""
        seen, self._seen, self._seen_order = self._seen, {}, deque()
        return seen

    def absorb(self, other: ReferenceStreamTracker) -> None:
        """The streams of a tracker that read other partitions (``verify --jobs``). A
        stream both read (a message stored under another key) keeps the higher head;
        its missing positions are those neither saw."""
        for stream_id, theirs in other._streams.items():
            mine = self._streams.get(stream_id)
            if mine is None:
                self._streams[stream_id] = theirs
                self.currently_missing += len(theirs.missing)
                continue
            missing = {p for p in mine.missing if p >= theirs.next or p in theirs.missing}
            missing |= {p for p in theirs.missing if p >= mine.next or p in mine.missing}
            self.currently_missing += len(missing) - len(mine.missing)
            mine.missing = missing or _NO_GAP
            mine.untracked_missing += theirs.untracked_missing
            high, low = (mine, theirs) if mine.next >= theirs.next else (theirs, mine)
            mine.own = {**low.own, **high.own}
            mine.claimed = {**low.claimed, **high.claimed}
            mine.next = high.next
        for partition, offset in other._first_offset.items():
            self._first_offset.setdefault(partition, offset)
        self.new_turns += other.new_turns
        self.forgotten_event_ids += other.forgotten_event_ids

    def __len__(self) -> int:
        return len(self._streams)
