"""What the start of a range says: streams that began before retention, and the heads an
earlier report proved (``verify --heads REPORT``), held against this range.

An anchor is a stream's (position, chain hash) that a report proved. In this range the
stream must still reach that position with that hash; a stream first seen past its
anchored head in a partition whose log start moved lost a prefix nobody proved gone
(``truncated``) or was rewritten there (``rewritten``). Without an anchor, such a stream
began before retention. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from turnaudit.identity import LEGACY_PRODUCER, StreamId, chain_hash
from turnaudit.verify.findings import (
    EXAMPLES,
    Finding,
    RetainedJson,
    Where,
    positions_text,
    stream_where,
)

# Stream heads of an earlier report: (position, chain hash) per stream.
Anchors = Mapping[StreamId, tuple[int, str]]
# Whether the range placed a turn of a stream; a chained stream's head (position, hash).
Holds = Callable[[StreamId], bool]
HeadOf = Callable[[StreamId], tuple[int, str] | None]


class RetainedStart:
    """The anchors, the chain hashes this range holds at them, and the streams the start
    of a retained log cut (began before retention, or a finding an anchor explains)."""

    def __init__(self, anchors: Anchors | None = None) -> None:
        self.anchors = dict(anchors or {})
        self.hashes: dict[StreamId, str] = {}  # the hash this range holds at an anchor
        self.prefix_findings: list[Finding] = []
        self.began_before_retention = 0
        self.examples: list[RetainedJson] = []

    def keep(
        self,
        stream: StreamId,
        sequence: int,
        value: bytes | None,
        fingerprint: bytes | None = None,
    ) -> None:
        anchor = self.anchors.get(stream)
        if anchor is not None and anchor[0] == sequence:
            self.hashes[stream] = chain_hash(value or b"", fingerprint)

    def absorb(self, other: RetainedStart) -> None:
        self.hashes.update(other.hashes)
        self.prefix_findings += other.prefix_findings
        self.began_before_retention += other.began_before_retention
        self.examples = (self.examples + other.examples)[:EXAMPLES]

    def first_seen_past_zero(self, stream: StreamId, prev_hash: str, where: Where) -> None:
        """A stream first seen past position 0 in a partition read from a moved log start:
        it began before retention, unless an anchor explains it as a finding."""
        if self.first_retained(stream, prev_hash, where):
            return
        self.began_before_retention += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(
                RetainedJson(
                    session_id=stream[0],
                    producer_id=stream[1],
                    partition=where["partition"],
                    offset=where["offset"],
                    position=where["position"],
                )
            )

    def first_retained(self, stream: StreamId, prev_hash: str, where: Where) -> bool:
        """A stream first seen past position 0 at a moved log start: True when an anchor
        explains it as a finding (its prefix after the anchored head is gone, or the first
        retained position does not chain to that head); False when it began before
        retention."""
        sequence = where.get("position", 0)
        anchor = self.anchors.get(stream)
        if anchor is None:
            return False
        if sequence > anchor[0] + 1:
            gone = list(range(anchor[0] + 1, sequence))
            where["positions"] = gone[:EXAMPLES]
            self.prefix_findings.append(
                Finding(
                    "truncated",
                    f"{len(gone)} position(s) after the head an earlier report proved "
                    f"({anchor[0]}) are gone from the start of the retained log: "
                    f"{positions_text(gone)}",
                    where,
                )
            )
            return True
        if sequence == anchor[0] + 1 and stream[1] != LEGACY_PRODUCER and prev_hash != anchor[1]:
            self.prefix_findings.append(
                Finding(
                    "rewritten",
                    f"the first retained position {sequence} does not chain to the "
                    f"head an earlier report proved ({anchor[0]})",
                    where,
                )
            )
            return True
        return False

    def expired(self, holds: Holds) -> int:
        """Anchored streams with no event left (in a range read from a moved log start,
        retention may have taken the whole stream: reported, not a finding)."""
        return sum(1 for stream in self.anchors if not holds(stream))

    def findings(
        self, holds: Holds, head_of: HeadOf, *, retained_from_moved_start: bool
    ) -> list[Finding]:
        found = list(self.prefix_findings)
        for stream, (position, digest) in sorted(self.anchors.items()):
            head = head_of(stream)  # this stream's alone: no table of every head
            where = stream_where(stream)
            where["position"] = position
            if not holds(stream):
                if retained_from_moved_start:
                    continue  # counted by expired()
                found.append(
                    Finding(
                        "anchor_absent",
                        "a stream an earlier report anchored has no event in this range",
                        where,
                    )
                )
            elif head is not None and head[0] < position:
                found.append(
                    Finding(
                        "truncated",
                        f"the stream ends at position {head[0]}, an earlier "
                        f"report saw it reach {position}",
                        where,
                    )
                )
            elif stream in self.hashes and self.hashes[stream] != digest:
                found.append(
                    Finding(
                        "rewritten",
                        f"position {position} has another chain hash than an earlier report saw",
                        where,
                    )
                )
        return found
