"""``verify --follow --keyring``'s trust state per stream and per producer, as it is
checkpointed beside the proof in ``<prefix>verify-state`` (``follow_trust``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from turnaudit.checkpoint_chain import ChainLink
from turnaudit.identity import StreamId

# Keys of the trust state in the state topic, each scoped by the turn partition whose
# streams it judges (the record lives in that partition's state partition): a worker
# taking a partition over reads that partition's trust as it was left.
TRUST_KEY = "trust:"
GaugeStatus = Literal["signed", "unsigned", "forged", "truncated", "pending"]


@dataclass
class StreamTrust:
    partition: int = -1  # -1: named by a checkpoint, no turn of it read yet
    top: int = -1  # highest position read
    signed: int = -1  # highest position a valid checkpoint signed
    expected: dict[int, tuple[str, int]] = field(default_factory=dict)  # pos -> hash, at_ms
    seen: dict[int, tuple[str, int]] = field(default_factory=dict)  # unsigned pos -> hash, ms
    forged: str = ""
    reason: str = ""
    truncated: str = ""
    uncovered_late: bool = False  # unsigned positions past the grace
    unchecked: int = 0  # signed positions whose turn's hash had left the window
    schemas: dict[str, int] = field(default_factory=dict)  # writer schema -> first position
    # Expected pos -> when its turn was written after (its checkpoint's predecessor, or its
    # checkpoint less twice the interval): retention may have removed it once that is old.
    written_after: dict[int, int] = field(default_factory=dict)

    def forget_removed(self, late: list[int], removed: Callable[[int], bool]) -> list[int]:
        """``late`` (signed positions not arrived) less those retention explains, which
        are forgotten: a later position was read (so the stream was read from past them;
        the proof judges a gap, and whether the partition's log start moved) and
        ``removed`` says retention may have taken a turn written at the time it was
        written after (its checkpoint's time when not known)."""
        kept = []
        for p in late:
            if p < self.top and removed(self.written_after.get(p, self.expected[p][1])):
                del self.expected[p]
                self.written_after.pop(p, None)
            else:
                kept.append(p)
        return kept

    def as_json(self) -> dict[str, object]:
        return {
            "p": self.partition,
            "t": self.top,
            "s": self.signed,
            "x": {str(k): list(v) for k, v in self.expected.items()},
            "n": {str(k): list(v) for k, v in self.seen.items()},
            "f": self.forged,
            "r": self.reason,
            "tr": self.truncated,
            "u": self.uncovered_late,
            "c": self.unchecked,
            "w": self.schemas,
            "xa": {str(k): v for k, v in self.written_after.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> StreamTrust:
        def pairs(v: object) -> dict[int, tuple[str, int]]:
            assert isinstance(v, dict)
            return {int(k): (str(h), int(t)) for k, (h, t) in v.items()}

        return cls(
            partition=_int(d["p"]),
            top=_int(d["t"]),
            signed=_int(d["s"]),
            expected=pairs(d["x"]),
            seen=pairs(d["n"]),
            forged=str(d["f"]),
            reason=str(d["r"]),
            truncated=str(d["tr"]),
            uncovered_late=bool(d["u"]),
            unchecked=_int(d["c"]),
            schemas={str(k): _int(v) for k, v in dict(d.get("w") or {}).items()},  # type: ignore[call-overload]  # JSON object
            written_after={int(k): _int(v) for k, v in dict(d.get("xa") or {}).items()},  # type: ignore[call-overload]  # JSON object
        )

    def settled_signed(self) -> bool:
        """Signed at every position read, and no signed position owed."""
        return (
            self.status() == "signed"
            and not (self.expected or self.seen)
            and (self.signed >= self.top)
        )

    def status(self) -> GaugeStatus:
        if self.forged:
            return "forged"
        if self.truncated:
            return "truncated"
        if self.signed >= 0:
            return "signed"
        return "unsigned" if self.uncovered_late else "pending"


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError("not an integer")
    return value


@dataclass(frozen=True)
class ProducerChain:
    """The last valid checkpoint of one producer's chain."""

    link: ChainLink
    final: bool
    schemas: frozenset[str] | None = None  # named by its format 2 checkpoints (None: none)

    def as_json(self) -> dict[str, object]:
        named = None if self.schemas is None else sorted(self.schemas)
        return {"i": self.link.index, "d": self.link.digest, "f": self.final, "s": named}


def trust_stream_key(scope: int, stream: StreamId) -> bytes:
    return f"{TRUST_KEY}{scope}:stream:{json.dumps(list(stream))}".encode()


def trust_producer_key(scope: int, producer_id: str) -> bytes:
    return f"{TRUST_KEY}{scope}:producer:{producer_id}".encode()


def trust_reader_key(scope: int) -> bytes:
    return f"{TRUST_KEY}{scope}:reader".encode()


def trust_retired_key(scope: int) -> bytes:
    """The count of streams that left signed (``FollowTrust.retire``)."""
    return f"{TRUST_KEY}{scope}:retired".encode()


TrustKeyKind = Literal["stream", "producer", "reader", "retired"]
_KINDS: tuple[TrustKeyKind, ...] = ("stream", "producer", "reader", "retired")


def parse_trust_key(key: bytes) -> tuple[int, TrustKeyKind, str] | None:
    """(scope, kind, rest) of a trust key; None for any other key of the state topic."""
    text = key.decode(errors="replace")
    if not text.startswith(TRUST_KEY):
        return None
    scope, _, kind_rest = text[len(TRUST_KEY) :].partition(":")
    kind, _, rest = kind_rest.partition(":")
    if not scope.isdigit():
        return None
    for known in _KINDS:
        if kind == known:
            return int(scope), known, rest
    return None
