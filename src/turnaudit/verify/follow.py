"""``verify --follow``'s proof of the stream, on the one stream tracker verify uses.

Each message of a partition is placed by ``StreamTracker`` (the native tracker one-shot
verify, the services and replay use: dedupe by event id, gaps, late arrivals, the chain),
checked against contracts 1-4 and 6 (``turnaudit.contracts``), and tallied per partition.
What the follower keeps besides is small: per partition the offset proved to and the
counts; per stream with open gaps, when each missing position opened (a position becomes
``lost`` ``grace_s`` after its gap opened).

Bounded memory: the tracker holds at most ``FollowMemory.streams`` streams in memory; the
others go to an SQLite file in a scratch folder and come back exactly as they were when
their session goes on (the spill one-shot verify uses). It remembers the newest
``FollowMemory.event_ids`` event ids; beyond them an unknown event id at a position
already taken is taken for an old redelivery (counted in ``tracker.forgotten_event_ids``),
as in the services. A restarted follower remembers positions, not ids: a copy of a turn
read before the restart is judged by its position alone (another event at a taken
position), and v1/v2 turns, which have only ids, are counted again. One-shot verify is
exact over any range. Memory is bounded by the two
settings and the open gaps, not by sessions or turns.

Checkpoints: ``checkpoint()`` returns the records of what changed since the last one, for
the compacted ``<prefix>verify-state`` topic: one per stream touched (its state in the
tracker's own format, its open gaps' times), one per partition (offset, counts, how its
reading began); ``retire`` drops a stream that ended whole, when the heads judge says so
(``turnaudit.verify.heads_judge``: once a checkpoint passing over its announcement is
written); its tombstone goes out with the next checkpoint. ``load_partition`` takes a
partition's records back.

Retention: a partition first read from a log start past 0 (no checkpoint) lets a stream
begin past position 0 (``began_before_retention``), as one-shot verify does.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from turnaudit._native import (
    drop_stream,
    restore_stream,
    start_partition,
    stream_partition,
    stream_state,
    take_dirty,
    track_dirty,
)
from turnaudit.contracts import check_event, check_key
from turnaudit.identity import LEGACY_PRODUCER, StreamId, StreamTracker, TrackResult, TurnOutcome
from turnaudit.serialization.native import VerifyStep
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.verify.follow_records import (
    PARTITION_KEY,
    STREAM_KEY,
    FollowCounts,
    FollowMemory,
    OpenGaps,
    Outcome,
    PartitionProof,
    StartMode,
    StateRecord,
    partition_key,
    stream_key,
    stream_record,
)
from turnaudit.verify.native_step import contract_check

_OUTCOMES: dict[TurnOutcome, Outcome] = {
    TurnOutcome.NEW: "new",
    TurnOutcome.LATE: "late",
    TurnOutcome.REDELIVERY: "duplicate",
    TurnOutcome.DUPLICATE: "duplicate",
    TurnOutcome.CONTENT_CHANGED: "content_changed",
    TurnOutcome.POSITION_REUSED: "position_reused",
}


class FollowState:
    """The proof of the partitions this member reads, checkpointable."""

    def __init__(
        self,
        *,
        grace_s: float = 900.0,
        memory: FollowMemory | None = None,
        decode: TurnEventDeserializer | None = None,
    ) -> None:
        self.grace_s = grace_s
        self.memory = memory or FollowMemory()
        self._scratch = tempfile.TemporaryDirectory(
            prefix="turnaudit-follow-", dir=self.memory.spill_dir
        )
        spill = Path(self._scratch.name) / "streams.sqlite3"
        self.tracker = StreamTracker(
            max_event_ids=self.memory.event_ids,
            max_streams=self.memory.streams,
            max_missing=self.memory.missing_per_stream,
            stream_spill=lambda: str(spill),
            stream_batch=min(4096, self.memory.streams),
        )
        track_dirty(self.tracker)  # the streams placed into: what a checkpoint writes
        # The ordinary messages of a batch, natively, as one-shot verify reads (``feed``).
        self.decode = decode
        self.step = (
            None
            if decode is None
            else VerifyStep(decode, self.tracker, contract_check(), {}, decode.native_plans())
        )
        self.partitions: dict[int, PartitionProof] = {}
        self.gaps: dict[StreamId, OpenGaps] = {}
        self._dirty: set[StreamId] = set()
        self._dirty_partitions: set[int] = set()
        self._retired: dict[StreamId, int | None] = {}  # -> its partition

    def close(self) -> None:
        """Removes the scratch folder (the spilled streams)."""
        self._scratch.cleanup()

    # -- partitions ----------------------------------------------------------------
    def load_partition(
        self,
        partition: int,
        *,
        first_offset: int,
        log_start: int,
        records: Iterable[tuple[bytes, bytes | None]] = (),
    ) -> StartMode:
        """Take a partition over: from its checkpoint records (the latest per key of the
        state topic; records of other partitions are skipped), else from where reading
        begins. Returns how its reading began."""
        proof: PartitionProof | None = None
        streams: dict[StreamId, dict[str, Any] | None] = {}
        for key, value in records:
            text = key.decode(errors="replace")
            if text == f"{PARTITION_KEY}{partition}" and value is not None:
                data = json.loads(value)
                proof = PartitionProof(
                    data.get("mode", "log_start"),
                    data["offset"],
                    FollowCounts.from_json(data["counts"]),
                    data["event_time_ms"],
                )
            elif text.startswith(STREAM_KEY):
                session, producer = json.loads(text[len(STREAM_KEY) :])
                stream = (str(session), str(producer))
                if value is None:
                    streams[stream] = None  # a tombstone: the stream was retired
                    continue
                data = json.loads(value)
                if data.get("p") == partition and "s" in data:
                    streams[stream] = data
        if proof is None:
            mode: StartMode = (
                "mid_log"
                if first_offset > log_start
                else "retention"
                if log_start > 0
                else "log_start"
            )
            proof = PartitionProof(mode, first_offset)
            streams = {}
        self.partitions[partition] = proof
        # The tracker opens a gap at a new stream's start only where reading began at the
        # log start, as it began the first time (a checkpoint keeps how).
        start_partition(
            self.tracker,
            partition,
            0 if proof.mode == "log_start" else -1,
            0 if proof.mode == "log_start" else first_offset,
        )
        for stream, data in streams.items():
            if data is None:
                continue
            restore_stream(self.tracker, stream[0], stream[1], base64.b64decode(data["s"]))
            opened = {int(k): float(v) for k, v in data.get("g", {}).items()}
            if opened:
                self.gaps[stream] = OpenGaps(partition, opened, set(data.get("l", ())))
        return proof.mode

    def forget(self, partitions: set[int]) -> None:
        """Partitions another member reads now: their streams leave this one."""
        self.tracker.forget_partitions(partitions)
        for stream in [s for s, g in self.gaps.items() if g.partition in partitions]:
            del self.gaps[stream]
        self._dirty.update(take_dirty(self.tracker))
        self._dirty = {s for s in self._dirty if self._partition_of(s) not in partitions}
        for p in partitions:
            self.partitions.pop(p, None)
            self._dirty_partitions.discard(p)

    def retire(self, stream: StreamId) -> bool:
        """A stream that ended (its producer closed it, every position present): it leaves
        the tracker, and its state record becomes a tombstone at the next checkpoint."""
        partition = self._partition_of(stream)
        gone = drop_stream(self.tracker, stream[0], stream[1])
        if gone:
            self.gaps.pop(stream, None)
            self._dirty.discard(stream)
            self._retired[stream] = partition
        return gone

    # -- one message -----------------------------------------------------------------
    def undecodable(self, partition: int, offset: int) -> bool:
        proof = self.partitions[partition]
        if offset < proof.next_offset:
            proof.counts.reread += 1
            return False
        proof.next_offset = offset + 1
        proof.counts.undecodable += 1
        self._dirty_partitions.add(partition)
        return True

    def observe(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes,
        *,
        event: Mapping[str, Any],
        now: float,
        fingerprint: bytes | None = None,
    ) -> tuple[Outcome, list[str]]:
        """One decoded message: what it is for its stream, and the contracts it breaks."""
        proof = self.partitions[partition]
        if offset < proof.next_offset:
            proof.counts.reread += 1
            return "reread", []
        proof.next_offset = offset + 1
        self._dirty_partitions.add(partition)
        occurred = event.get("occurred_at")
        if isinstance(occurred, int) and occurred > proof.event_time_ms:
            proof.event_time_ms = occurred
        return self.judge(partition, offset, key, value, event, now=now, fingerprint=fingerprint)

    def judge(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes,
        event: Mapping[str, Any],
        *,
        now: float,
        fingerprint: bytes | None,
    ) -> tuple[Outcome, list[str]]:
        """One decoded message placed and judged (its partition's bookkeeping done)."""
        held = len(self.tracker)
        result = self.tracker.observe(
            event, value, partition=partition, offset=offset, fingerprint=fingerprint
        )
        return self.placed(partition, key, event, result, opened=len(self.tracker) != held, now=now)

    def placed(
        self,
        partition: int,
        key: bytes | None,
        event: Mapping[str, Any],
        result: TrackResult,
        *,
        opened: bool,
        now: float,
    ) -> tuple[Outcome, list[str]]:
        """What a placed message adds (``opened``: its placement opened a stream)."""
        counts = self.partitions[partition].counts
        breaches = [b.contract.value for b in check_event(event)]
        key_breach = check_key(key, event)
        if key_breach is not None:
            breaches.insert(0, key_breach.contract.value)
        for contract in breaches:
            counts.breaches[contract] = counts.breaches.get(contract, 0) + 1
        stream = result.stream
        self._retired.pop(stream, None)
        if opened and result.sequence > 0 and self.partitions[partition].mode == "retention":
            counts.began_before_retention += 1
        self._gaps_moved(stream, partition, result, now)
        return _tallied(counts, stream, result), breaches

    def touched(self, partitions: Iterable[int]) -> None:
        """Partitions whose proof moved (a batch read outside ``observe``)."""
        self._dirty_partitions.update(partitions)

    def _gaps_moved(
        self, stream: StreamId, partition: int, result: TrackResult, now: float
    ) -> None:
        """A gap the placement opened (its positions' time kept, up to the per-stream
        bound) or a missing position it filled."""
        sequence = result.sequence
        if result.missing_opened:
            gaps = self.gaps.setdefault(stream, OpenGaps(partition))
            room = self.memory.missing_per_stream - len(gaps.opened)
            for position in range(sequence - result.missing_opened, sequence)[: max(0, room)]:
                gaps.opened[position] = now
        closing = self.gaps.get(stream) if result.gap_closed else None
        if closing is not None:
            closing.opened.pop(sequence, None)
            closing.lost.discard(sequence)
            if not closing.opened:
                del self.gaps[stream]

    # -- over time ---------------------------------------------------------------------
    def sweep(self, now: float) -> int:
        """Missing positions past the grace become lost (each counted once)."""
        newly = 0
        for stream, gaps in self.gaps.items():
            for position, opened in gaps.opened.items():
                if position not in gaps.lost and now - opened >= self.grace_s:
                    gaps.lost.add(position)
                    self.partitions[gaps.partition].counts.lost += 1
                    self._dirty.add(stream)
                    self._dirty_partitions.add(gaps.partition)
                    newly += 1
        return newly

    def missing(self, now: float) -> tuple[int, int]:
        """Positions missing now: (within the grace, past it)."""
        within = overdue = 0
        for gaps in self.gaps.values():
            for opened in gaps.opened.values():
                if now - opened >= self.grace_s:
                    overdue += 1
                else:
                    within += 1
        return within, overdue

    def streams_held(self) -> int:
        """Streams this member holds (in memory and spilled)."""
        return len(self.tracker)

    def totals(self) -> FollowCounts:
        total = FollowCounts()
        for proof in self.partitions.values():
            total.add(proof.counts)
        return total

    # -- checkpoints -----------------------------------------------------------------
    def checkpoint(self) -> list[StateRecord]:
        """Records of what changed since the last checkpoint, each with the turn partition
        it is about: streams first (a retired one a tombstone), then each partition's
        offset and counts (the topic is compacted)."""
        records: list[StateRecord] = []
        self._dirty.update(take_dirty(self.tracker))
        for stream in sorted(self._dirty):
            held = stream_state(self.tracker, stream[0], stream[1])
            if held is None:
                continue  # forgotten meanwhile (its partition left this member)
            partition, state = held
            value = stream_record(partition, state, self.gaps.get(stream))
            records.append((partition, stream_key(stream), value))
        records += [(p, stream_key(s), None) for s, p in sorted(self._retired.items())]
        records += [
            (p, partition_key(p), json.dumps(self.partitions[p].as_json()).encode())
            for p in sorted(self._dirty_partitions)
            if p in self.partitions
        ]
        self._dirty.clear()
        self._retired.clear()
        self._dirty_partitions.clear()
        return records

    def _partition_of(self, stream: StreamId) -> int | None:
        gaps = self.gaps.get(stream)
        if gaps is not None:
            return gaps.partition
        return stream_partition(self.tracker, stream[0], stream[1])


def _tallied(counts: FollowCounts, stream: StreamId, result: TrackResult) -> Outcome:
    """What a placed message is for the follower, counted on its partition."""
    outcome = _OUTCOMES[result.outcome]
    if result.counts_as_turn:
        counts.proved += 1
        if stream[1] == LEGACY_PRODUCER:
            return "legacy"
        if result.chain_break is not None:
            counts.chain += 1
            return "chain"
        if outcome == "late":
            counts.late += 1
    elif outcome == "duplicate":
        counts.duplicates += 1
    elif outcome == "position_reused":
        counts.position_reused += 1
    else:
        counts.content_changed += 1
    return outcome
