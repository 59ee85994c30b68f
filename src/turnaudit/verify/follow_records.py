"""What ``verify --follow`` keeps, as records: a stream's proof, a partition's, the counts,
and their JSON forms and keys on the compacted ``<prefix>verify-state`` topic. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from turnaudit.identity import StreamId

RECENT = 8  # positions per stream whose hash is kept (duplicate copy vs reused position)
HASH_DIGITS = 16

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
        return {
            "proved": self.proved,
            "late": self.late,
            "duplicates": self.duplicates,
            "chain": self.chain,
            "position_reused": self.position_reused,
            "lost": self.lost,
            "breaches": dict(sorted(self.breaches.items())),
            "undecodable": self.undecodable,
            "began_before_retention": self.began_before_retention,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FollowCounts:
        return cls(
            proved=data["proved"],
            late=data["late"],
            duplicates=data["duplicates"],
            chain=data["chain"],
            position_reused=data["position_reused"],
            lost=data["lost"],
            breaches=dict(data["breaches"]),
            undecodable=data["undecodable"],
            began_before_retention=data["began_before_retention"],
        )

    def add(self, other: FollowCounts) -> None:
        for name in (
            "proved",
            "late",
            "duplicates",
            "chain",
            "position_reused",
            "lost",
            "undecodable",
            "began_before_retention",
            "reread",
        ):
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
        return {
            "mode": self.mode,
            "offset": self.next_offset,
            "event_time_ms": self.event_time_ms,
            "counts": self.counts.as_json(),
        }


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
        return {
            "p": self.partition,
            "o": self.offset,
            "n": self.next,
            "h": self.head,
            "m": {str(k): v for k, v in self.missing.items()},
            "l": sorted(self.lost),
            "e": {str(k): v for k, v in self.edges.items()},
            "c": {str(k): v for k, v in self.claimed.items()},
            "r": {str(k): v for k, v in self.recent.items()},
            "b": self.began_before_retention,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProvedStream:
        return cls(
            partition=d["p"],
            offset=d["o"],
            next=d["n"],
            head=d["h"],
            missing={int(k): v for k, v in d["m"].items()},
            lost=set(d["l"]),
            edges={int(k): v for k, v in d["e"].items()},
            claimed={int(k): v for k, v in d["c"].items()},
            recent={int(k): v for k, v in d["r"].items()},
            began_before_retention=d["b"],
        )

    def remember(self, position: int, content: str) -> None:
        self.recent[position] = content[:HASH_DIGITS]
        if len(self.recent) > RECENT:
            del self.recent[min(self.recent)]


Outcome = Literal["new", "late", "duplicate", "chain", "position_reused", "reread", "legacy"]


def stream_key(stream: StreamId) -> bytes:
    return (STREAM_KEY + json.dumps(list(stream))).encode()


def partition_key(partition: int) -> bytes:
    return f"{PARTITION_KEY}{partition}".encode()
