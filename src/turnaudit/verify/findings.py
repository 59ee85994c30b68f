"""What verify reports about a message or a stream: one finding, its place, its JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from turnaudit.contracts import Breach
from turnaudit.identity import StreamId, TrackResult, TurnOutcome

# Findings listed per kind in the report (all are counted).
EXAMPLES = 20


class RetainedJson(TypedDict):
    """A stream that began before retention: its oldest retained position and where."""

    session_id: str
    producer_id: str
    partition: int
    offset: int
    position: int


class HeadJson(TypedDict):
    """A chained stream's last position and its chain hash."""

    session_id: str
    producer_id: str
    position: int
    hash: str


class Where(TypedDict, total=False):
    """Where a finding is: a message's place, its stream and position, or a stream's."""

    partition: int
    offset: int
    session_id: str
    producer_id: str
    position: int
    event_id: str
    positions: list[int]
    pack: str
    counter: str
    checkpoint: int  # a signed checkpoint's index in its producer's chain


class _FindingHead(TypedDict):
    kind: str
    detail: str


class FindingJson(_FindingHead, Where):
    """A finding in the report: ``kind``, ``detail``, then the keys of its ``Where``."""


@dataclass
class Finding:
    kind: str
    detail: str
    where: Where

    def as_json(self) -> FindingJson:
        found: FindingJson = {"kind": self.kind, "detail": self.detail, **self.where}
        return found

    @property
    def place(self) -> tuple[int, int] | None:
        """(partition, offset) of a finding about one message."""
        if "partition" in self.where and "offset" in self.where:
            return self.where["partition"], self.where["offset"]
        return None


def stream_where(stream: StreamId) -> Where:
    return Where(session_id=stream[0], producer_id=stream[1])


def message_where(partition: int, offset: int) -> Where:
    return Where(partition=partition, offset=offset)


def positions_text(positions: list[int]) -> str:
    """The first positions of a list, and how many there are in all when more."""
    shown = ", ".join(map(str, positions[:EXAMPLES]))
    return shown + (f" … ({len(positions)} in all)" if len(positions) > EXAMPLES else "")


def classify(result: TrackResult, where: Where) -> list[Finding]:
    """The unexplained findings one tracked message makes (redeliveries and duplicate
    copies are explained: counted by the ``Verifier``, not listed here)."""
    found = []
    if result.outcome is TurnOutcome.CONTENT_CHANGED:
        found.append(
            Finding(
                "content_changed", "an event id seen before comes back with other content", where
            )
        )
    elif result.outcome is TurnOutcome.POSITION_REUSED:
        found.append(
            Finding("position_reused", result.chain_break or "position already taken", where)
        )
    if result.chain_break and result.outcome is not TurnOutcome.POSITION_REUSED:
        found.append(Finding("chain_break", result.chain_break, where))
    if result.gap_closed:
        found.append(
            Finding(
                "late_arrival",
                f"position {result.sequence} stored after later positions of its stream",
                where,
            )
        )
    return found


def lost_findings(missing: Mapping[StreamId, list[int]]) -> list[Finding]:
    """One ``lost`` finding per stream with positions that never arrived, by stream."""
    found = []
    for stream, positions in sorted(missing.items()):
        where = stream_where(stream)
        where["positions"] = positions[:EXAMPLES]
        found.append(
            Finding(
                "lost",
                f"{len(positions)} position(s) never arrived: {positions_text(positions)}",
                where,
            )
        )
    return found


def breaching_turn(
    event: Mapping[str, Any], breaches: Sequence[Breach], recorded: Sequence[str], where: Where
) -> tuple[str, list[str], Finding]:
    """A turn that broke a contract: its pack, the contracts it broke, and its listing."""
    details = {b.contract.value: b.detail for b in breaches}
    for name in recorded:
        details.setdefault(name, "recorded by the producer")
    pack = str(event.get("pack_id", ""))
    listed = Where(**where)
    listed["pack"] = pack
    finding = Finding("breaching_turn", "; ".join(f"{c}: {d}" for c, d in details.items()), listed)
    return pack, list(details), finding
