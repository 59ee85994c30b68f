"""What ``verify --follow`` keeps, as records: a stream's proof, a partition's, the counts,
and their JSON forms and keys on the compacted ``<prefix>verify-state`` topic. Pure."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _quoted
from pathlib import Path
from typing import Any, Literal, TypedDict

from turnaudit.identity import StreamId

# How a partition's reading began: from a checkpoint, from log start 0, from a log
# start retention moved, or mid-log (a new group started at the end).
StartMode = Literal["checkpoint", "log_start", "retention", "mid_log"]
CHAIN_KINDS = ("chain", "position_reused", "content_changed")

PARTITION_KEY = "partition:"
STREAM_KEY = "stream:"


class FollowCountsJson(TypedDict):
    proved: int
    late: int
    duplicates: int
    chain: int
    position_reused: int
    content_changed: int
    lost: int
    breaches: dict[str, int]
    undecodable: int
    began_before_retention: int


class PartitionProofJson(TypedDict):
    mode: StartMode
    offset: int
    event_time_ms: int
    counts: FollowCountsJson


@dataclass
class FollowCounts:
    """What one partition's proof counted so far (checkpointed with it)."""

    proved: int = 0  # turns (new or late), legacy v1/v2 turns included
    late: int = 0
    duplicates: int = 0
    chain: int = 0
    position_reused: int = 0
    content_changed: int = 0  # an event id again, with other content
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
            "content_changed": self.content_changed,
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
            content_changed=data.get("content_changed", 0),
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
            "content_changed",
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


Outcome = Literal[
    "new",
    "late",
    "duplicate",
    "chain",
    "position_reused",
    "content_changed",
    "reread",
    "legacy",
    "undecodable",
]


def stream_key(stream: StreamId) -> bytes:
    """``stream:`` and ``json.dumps([session, producer])``, byte for byte (the keys already
    on the state topic), by json's own C string encoder without the rest of its machinery:
    a checkpoint writes one per stream placed into."""
    return f"{STREAM_KEY}[{_quoted(stream[0])}, {_quoted(stream[1])}]".encode()


def stream_record(partition: int | None, state: bytes, gaps: OpenGaps | None) -> bytes:
    """A stream's state record: ``json.dumps`` of its partition, its state in the tracker's
    encoding (base64) and, with open gaps, when each opened and which are lost; the common
    record, with none, written directly (the same bytes)."""
    encoded = base64.b64encode(state)
    if gaps is None and partition is not None:
        return b'{"p": %d, "s": "%s"}' % (partition, encoded)
    record: dict[str, object] = {"p": partition, "s": encoded.decode()}
    if gaps is not None:
        record["g"] = {str(k): v for k, v in gaps.opened.items()}
        record["l"] = sorted(gaps.lost)
    return json.dumps(record).encode()


def partition_key(partition: int) -> bytes:
    return f"{PARTITION_KEY}{partition}".encode()


# A state record: the turn partition it is about (None: none), its key, its value (None:
# a tombstone).
StateRecord = tuple[int | None, bytes, bytes | None]


@dataclass(frozen=True)
class FollowMemory:
    """The follower's bounds: streams and event ids in memory, missing positions tracked
    per stream (beyond it a gap is counted, a late arrival into it not recognised)."""

    streams: int = 100_000
    event_ids: int = 500_000
    missing_per_stream: int = 1_000
    spill_dir: Path | None = None  # the scratch folder's parent (default: the system's)


@dataclass
class OpenGaps:
    """A stream's missing positions: when each gap opened, which are lost already."""

    partition: int
    opened: dict[int, float] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
