"""``verify --follow``'s proof of the stream, kept per stream and checkpointable. Pure.

Each message of a partition is checked as it arrives: present once, chained, in
order, late arrivals closing gaps; what is proved is kept as a small state per
ordered stream (last position and hash, open gaps with the time they opened,
the hashes at their edges, the last few positions' hashes) and per partition
(the offset proved to, the counts so far). ``checkpoint()`` returns the records
of what changed since the last one (key, JSON value; ``None`` is a tombstone),
for a compacted topic; ``load_partition`` takes them back.

State per stream, not per turn: memory and checkpoint size grow with the
streams, never with the turns. A position below a stream's next one that is
not a gap is compared with the last ``RECENT`` positions' hashes (a duplicate
copy of the same bytes is explained); further back it is counted as a reused
position (the follower keeps no older hashes).

Retention: a partition first read from a log start past 0 (no checkpoint) lets
a stream begin past position 0 (``began_before_retention``), as one-shot verify.
Missing positions become ``lost`` only ``grace_s`` after the gap opened.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from turnaudit.contracts import check_event, check_key
from turnaudit.identity import GENESIS_HASH, LEGACY_PRODUCER, StreamId, chain_hash
from turnaudit.verify.follow_records import (
    HASH_DIGITS,
    PARTITION_KEY,
    STREAM_KEY,
    FollowCounts,
    Outcome,
    PartitionProof,
    ProvedStream,
    StartMode,
    partition_key,
    stream_key,
)


class FollowState:
    """The proof of the partitions this member reads, checkpointable."""

    def __init__(self, *, grace_s: float = 900.0) -> None:
        self.grace_s = grace_s
        self.partitions: dict[int, PartitionProof] = {}
        self.streams: dict[StreamId, ProvedStream] = {}
        self._gappy: set[StreamId] = set()
        self._dirty: set[StreamId] = set()
        self._dirty_partitions: set[int] = set()

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
        state topic, for this partition), else from where reading begins."""
        proof: PartitionProof | None = None
        streams: dict[StreamId, ProvedStream] = {}
        for key, value in records:
            text = key.decode()
            if text == f"{PARTITION_KEY}{partition}" and value is not None:
                data = json.loads(value)
                proof = PartitionProof(
                    "checkpoint",
                    data["offset"],
                    FollowCounts.from_json(data["counts"]),
                    data["event_time_ms"],
                )
            elif text.startswith(STREAM_KEY):
                session, producer = json.loads(text[len(STREAM_KEY) :])
                if value is None:
                    streams.pop((session, producer), None)
                    continue
                stream = ProvedStream.from_json(json.loads(value))
                if stream.partition == partition:
                    streams[(session, producer)] = stream
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
        for stream_id, stream in streams.items():
            self.streams[stream_id] = stream
            if stream.missing:
                self._gappy.add(stream_id)
        return proof.mode

    def forget(self, partitions: set[int]) -> None:
        for stream_id in [s for s, st in self.streams.items() if st.partition in partitions]:
            del self.streams[stream_id]
            self._gappy.discard(stream_id)
            self._dirty.discard(stream_id)
        for p in partitions:
            self.partitions.pop(p, None)
            self._dirty_partitions.discard(p)

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
        counts = proof.counts
        if offset < proof.next_offset:
            counts.reread += 1
            return "reread", []
        proof.next_offset = offset + 1
        self._dirty_partitions.add(partition)
        breaches = [b.contract.value for b in check_event(event)]
        key_breach = check_key(key, event)
        if key_breach is not None:
            breaches.insert(0, key_breach.contract.value)
        for contract in breaches:
            counts.breaches[contract] = counts.breaches.get(contract, 0) + 1
        occurred = event.get("occurred_at")
        if isinstance(occurred, int) and occurred > proof.event_time_ms:
            proof.event_time_ms = occurred
        stream_id = (event["session_id"], event.get("producer_id") or LEGACY_PRODUCER)
        if stream_id[1] == LEGACY_PRODUCER:
            counts.proved += 1  # v1/v2: no chain, no positions to hold them to
            return "legacy", breaches
        outcome = self._place(
            proof,
            stream_id,
            partition,
            offset,
            event=event,
            content=chain_hash(value, fingerprint),
            now=now,
        )
        if outcome in ("new", "late"):
            counts.proved += 1
        if outcome == "late":
            counts.late += 1
        elif outcome == "duplicate":
            counts.duplicates += 1
        elif outcome == "chain":
            counts.proved += 1
            counts.chain += 1
        elif outcome == "position_reused":
            counts.position_reused += 1
        return outcome, breaches

    def _place(
        self,
        proof: PartitionProof,
        stream_id: StreamId,
        partition: int,
        offset: int,
        *,
        event: Mapping[str, Any],
        content: str,
        now: float,
    ) -> Outcome:
        sequence = int(event["sequence"])
        prev = event.get("prev_hash") or ""
        stream = self.streams.get(stream_id)
        if stream is None:
            stream = self.streams[stream_id] = ProvedStream(partition, offset)
            if sequence > 0:
                if proof.mode == "log_start":
                    self._open(stream_id, stream, 0, sequence, now)
                elif proof.mode == "retention":
                    stream.began_before_retention = True
                    proof.counts.began_before_retention += 1
                stream.next = sequence
        self._dirty.add(stream_id)
        stream.offset = offset
        if sequence >= stream.next:
            return self._advance(stream_id, stream, sequence, prev, content=content, now=now)
        if sequence in stream.missing:
            return self._fill(stream_id, stream, sequence, prev, content)
        if stream.recent.get(sequence) == content[:HASH_DIGITS]:
            return "duplicate"
        return "position_reused"

    def _advance(
        self,
        stream_id: StreamId,
        stream: ProvedStream,
        sequence: int,
        prev: str,
        *,
        content: str,
        now: float,
    ) -> Outcome:
        """A position at or past the stream's next: in order, or opening a gap."""
        broken = False
        if sequence == 0:
            broken = prev != GENESIS_HASH
        elif sequence == stream.next and stream.head:
            broken = prev != stream.head
        if sequence > stream.next:
            if stream.head:
                stream.edges[stream.next - 1] = stream.head
            stream.claimed[sequence - 1] = prev
            self._open(stream_id, stream, stream.next, sequence, now)
        stream.head = content
        stream.next = sequence + 1
        stream.remember(sequence, content)
        return "chain" if broken else "new"

    def _fill(
        self, stream_id: StreamId, stream: ProvedStream, sequence: int, prev: str, content: str
    ) -> Outcome:
        """A late arrival into a gap: chained to both its neighbours where they are here."""
        del stream.missing[sequence]
        stream.lost.discard(sequence)
        broken = False
        if sequence == 0:
            broken = prev != GENESIS_HASH
        elif sequence - 1 in stream.missing:
            stream.claimed[sequence - 1] = prev
        else:
            left = stream.edges.pop(sequence - 1, None)
            broken = left is not None and left != prev
        claimed = stream.claimed.pop(sequence, None)
        broken = broken or (claimed is not None and claimed != content)
        if sequence + 1 in stream.missing:
            stream.edges[sequence] = content
        if not stream.missing:
            self._gappy.discard(stream_id)
        stream.remember(sequence, content)
        return "chain" if broken else "late"

    def _open(
        self, stream_id: StreamId, stream: ProvedStream, start: int, end: int, now: float
    ) -> None:
        for position in range(start, end):
            stream.missing[position] = now
        if end > start:
            self._gappy.add(stream_id)

    # -- over time ---------------------------------------------------------------------
    def sweep(self, now: float) -> int:
        """Missing positions past the grace become lost (each counted once)."""
        newly = 0
        for stream_id in list(self._gappy):
            stream = self.streams[stream_id]
            for position, opened in stream.missing.items():
                if position not in stream.lost and now - opened >= self.grace_s:
                    stream.lost.add(position)
                    self.partitions[stream.partition].counts.lost += 1
                    self._dirty.add(stream_id)
                    self._dirty_partitions.add(stream.partition)
                    newly += 1
        return newly

    def missing(self, now: float) -> tuple[int, int]:
        """Positions missing now: (within the grace, past it)."""
        within = overdue = 0
        for stream_id in self._gappy:
            for opened in self.streams[stream_id].missing.values():
                if now - opened >= self.grace_s:
                    overdue += 1
                else:
                    within += 1
        return within, overdue

    def totals(self) -> FollowCounts:
        total = FollowCounts()
        for proof in self.partitions.values():
            total.add(proof.counts)
        return total

    # -- checkpoints -----------------------------------------------------------------
    def checkpoint(self) -> list[tuple[bytes, bytes | None]]:
        """Records of what changed since the last checkpoint: streams first, then each
        partition's offset and counts (the state topic is compacted by key)."""
        records: list[tuple[bytes, bytes | None]] = [
            (stream_key(s), json.dumps(self.streams[s].as_json()).encode())
            for s in sorted(self._dirty)
            if s in self.streams
        ]
        records += [
            (partition_key(p), json.dumps(self.partitions[p].as_json()).encode())
            for p in sorted(self._dirty_partitions)
            if p in self.partitions
        ]
        self._dirty.clear()
        self._dirty_partitions.clear()
        return records
