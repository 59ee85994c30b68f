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
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from turnaudit.contracts import check_event, check_key
from turnaudit.identity import GENESIS_HASH, LEGACY_PRODUCER, StreamId, chain_hash

RECENT = 8  # positions per stream whose hash is kept (duplicate copy vs reused position)
_DIGITS = 16

# How a partition's reading began: from a checkpoint, from log start 0, from a log
# start retention moved, or mid-log (a new group started at the end).
StartMode = Literal["checkpoint", "log_start", "retention", "mid_log"]
CHAIN_KINDS = ("chain", "position_reused")

PARTITION_KEY = "partition:"
STREAM_KEY = "stream:"


class FollowCountsJson(TypedDict):
    proved: int
    late: int
    duplicates: int
    chain: int
    position_reused: int
    lost: int
    breaches: dict[str, int]
    undecodable: int
    began_before_retention: int


class PartitionProofJson(TypedDict):
    mode: StartMode
    offset: int
    event_time_ms: int
    counts: FollowCountsJson


# A proved stream, in the short keys the state topic keeps (many per partition).
class ProvedStreamJson(TypedDict):
    p: int
    o: int
    n: int
    h: str
    m: dict[str, float]
    l: list[int]  # noqa: E741 - the state topic's short key for the lost positions
    e: dict[str, str]
    c: dict[str, str]
    r: dict[str, str]
    b: bool


@dataclass
class FollowCounts:
    """What one partition's proof counted so far (checkpointed with it)."""

    proved: int = 0  # turns (new or late), legacy v1/v2 turns included
    late: int = 0
    duplicates: int = 0
    chain: int = 0
    position_reused: int = 0
    lost: int = 0  # missing positions past the grace
    breaches: dict[str, int] = field(default_factory=dict)
    undecodable: int = 0
    began_before_retention: int = 0
    reread: int = 0  # messages already proved, read again after a restart (not checkpointed)

    def as_json(self) -> FollowCountsJson:
        return {"proved": self.proved, "late": self.late, "duplicates": self.duplicates,
                "chain": self.chain, "position_reused": self.position_reused,
                "lost": self.lost, "breaches": dict(sorted(self.breaches.items())),
                "undecodable": self.undecodable,
                "began_before_retention": self.began_before_retention}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FollowCounts:
        return cls(proved=data["proved"], late=data["late"], duplicates=data["duplicates"],
                   chain=data["chain"], position_reused=data["position_reused"],
                   lost=data["lost"], breaches=dict(data["breaches"]),
                   undecodable=data["undecodable"],
                   began_before_retention=data["began_before_retention"])

    def add(self, other: FollowCounts) -> None:
        for name in ("proved", "late", "duplicates", "chain", "position_reused", "lost",
                     "undecodable", "began_before_retention", "reread"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for contract, n in other.breaches.items():
            self.breaches[contract] = self.breaches.get(contract, 0) + n


@dataclass
class PartitionProof:
    mode: StartMode
    next_offset: int  # every offset below is proved
    counts: FollowCounts = field(default_factory=FollowCounts)
    event_time_ms: int = 0  # occurred_at of the last turn proved

    def as_json(self) -> PartitionProofJson:
        return {"mode": self.mode, "offset": self.next_offset, "event_time_ms": self.event_time_ms,
                "counts": self.counts.as_json()}


@dataclass
class ProvedStream:
    partition: int
    offset: int  # the last offset of this stream taken
    next: int = 0  # one past the highest position seen
    head: str = ""  # chain hash of position next - 1 ("" before the first)
    missing: dict[int, float] = field(default_factory=dict)  # position -> when the gap opened
    lost: set[int] = field(default_factory=set)  # missing past the grace (counted once)
    edges: dict[int, str] = field(default_factory=dict)  # own hash of a gap's left neighbour
    claimed: dict[int, str] = field(default_factory=dict)  # prev_hash a gap's right side names
    recent: dict[int, str] = field(default_factory=dict)  # last positions' hash prefixes
    began_before_retention: bool = False

    def as_json(self) -> ProvedStreamJson:
        return {"p": self.partition, "o": self.offset, "n": self.next, "h": self.head,
                "m": {str(k): v for k, v in self.missing.items()}, "l": sorted(self.lost),
                "e": {str(k): v for k, v in self.edges.items()},
                "c": {str(k): v for k, v in self.claimed.items()},
                "r": {str(k): v for k, v in self.recent.items()},
                "b": self.began_before_retention}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProvedStream:
        return cls(partition=d["p"], offset=d["o"], next=d["n"], head=d["h"],
                   missing={int(k): v for k, v in d["m"].items()}, lost=set(d["l"]),
                   edges={int(k): v for k, v in d["e"].items()},
                   claimed={int(k): v for k, v in d["c"].items()},
                   recent={int(k): v for k, v in d["r"].items()},
                   began_before_retention=d["b"])

    def remember(self, position: int, content: str) -> None:
        self.recent[position] = content[:_DIGITS]
        if len(self.recent) > RECENT:
            del self.recent[min(self.recent)]


Outcome = Literal["new", "late", "duplicate", "chain", "position_reused", "reread", "legacy"]


def stream_key(stream: StreamId) -> bytes:
    return (STREAM_KEY + json.dumps(list(stream))).encode()


def partition_key(partition: int) -> bytes:
    return f"{PARTITION_KEY}{partition}".encode()


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
        self, partition: int, *, first_offset: int, log_start: int,
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
                proof = PartitionProof("checkpoint", data["offset"],
                                       FollowCounts.from_json(data["counts"]),
                                       data["event_time_ms"])
            elif text.startswith(STREAM_KEY):
                session, producer = json.loads(text[len(STREAM_KEY):])
                if value is None:
                    streams.pop((session, producer), None)
                    continue
                stream = ProvedStream.from_json(json.loads(value))
                if stream.partition == partition:
                    streams[(session, producer)] = stream
        if proof is None:
            mode: StartMode = ("mid_log" if first_offset > log_start
                               else "retention" if log_start > 0 else "log_start")
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
        self, partition: int, offset: int, key: bytes | None, value: bytes, *,
        event: Mapping[str, Any], now: float,
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
        outcome = self._place(proof, stream_id, partition, offset, event=event,
                              content=chain_hash(value), now=now)
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
        self, proof: PartitionProof, stream_id: StreamId, partition: int, offset: int, *,
        event: Mapping[str, Any], content: str, now: float,
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
        if stream.recent.get(sequence) == content[:_DIGITS]:
            return "duplicate"
        return "position_reused"

    def _advance(self, stream_id: StreamId, stream: ProvedStream, sequence: int, prev: str, *,
                 content: str, now: float) -> Outcome:
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

    def _fill(self, stream_id: StreamId, stream: ProvedStream, sequence: int, prev: str,
              content: str) -> Outcome:
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

    def _open(self, stream_id: StreamId, stream: ProvedStream, start: int, end: int,
              now: float) -> None:
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
            for s in sorted(self._dirty) if s in self.streams
        ]
        records += [(partition_key(p), json.dumps(self.partitions[p].as_json()).encode())
                    for p in sorted(self._dirty_partitions) if p in self.partitions]
        self._dirty.clear()
        self._dirty_partitions.clear()
        return records
