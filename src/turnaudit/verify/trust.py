"""Per-stream trust: each chained stream of a range against the signed checkpoints
(``verify --keyring``). Pure: no I/O.

A stream is

* ``signed``: every signed head of it the range holds has the chain hash its checkpoint
  signed (one signed head vouches for every earlier position: a chain hash covers its
  predecessor's). Turns after its last signed head, of a producer that did not close
  cleanly (a crash), are counted in ``unsigned_tail``: at most one checkpoint interval or
  count of turns;
* ``unsigned``: no checkpoint names it (a publisher without a key, or a stream begun after
  the last checkpoint of a producer that did not close cleanly), and the keyring does not
  require signatures;
* ``forged``: a checkpoint that names it does not verify (bad signature, unknown key, a
  key outside its validity, a hole in its chain); or a position a valid checkpoint signed
  has another chain hash on the stream; or it has turns after its producer's final
  checkpoint (a stream its cleanly closed producer never named included); or, when
  signatures are required, turns no valid checkpoint covers;
* ``truncated``: the stream on the topic ends before a signed head (the range reaches
  the end of the topic), or, read from a moved log start, lacks a signed position whose
  checkpoint is newer than now minus the topic's ``retention.ms`` (retention cannot have
  removed it);
* ``missing``: a stream a valid checkpoint names that the range, read from the log start
  to the end, does not hold at all, and retention does not explain.

Every turn is judged: v1/v2 turns (no producer id, no chain) form an ``unsigned`` stream
per session, ``forged`` inside a session a valid checkpoint signs. A turn whose writer
schema its producer's valid checkpoints do not name (format 2) is ``forged``. An invalid
checkpoint is a finding of its own and changes no stream's status. With a keyring, an
``unsigned`` stream is a finding unless the keyring's ``[[allow_unsigned]]`` allows it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from turnaudit.checkpoint_chain import (
    ChainReport,
    Problem,
)
from turnaudit.checkpoints import UnsignedAllowance
from turnaudit.identity import LEGACY_PRODUCER, StreamId
from turnaudit.verify.findings import EXAMPLES, Finding, Where, stream_where

Status = Literal["signed", "unsigned", "forged", "truncated", "missing"]
STATUSES: tuple[Status, ...] = ("signed", "unsigned", "forged", "truncated", "missing")
FINDING_STATUSES = frozenset({"forged", "truncated", "missing"})


class StreamTrustJson(TypedDict):
    session_id: str
    producer_id: str
    status: Status
    signed_position: int | None  # the highest position a valid checkpoint signed
    last_seen: int | None  # the highest position the range holds
    unsigned_tail: int  # positions after the signed head (no finding unless required)
    detail: str
    allowed: bool  # unsigned, and allowed by the keyring's [[allow_unsigned]]


class InvalidCheckpointJson(TypedDict):
    producer_id: str
    index: int
    key_id: str
    problem: Problem
    detail: str
    streams: int
    offset: int | None  # where it was written on the checkpoints topic


class CheckpointsJson(TypedDict):
    read: int
    valid: int
    invalid: int
    not_checkpoints: int  # records on the topic that are not checkpoints
    closed_producers: int  # producers whose chains end with a final checkpoint
    # producers whose chain begins past index 0: retention removed the checkpoints before
    started_after_retention: int


class TrustJson(TypedDict):
    keyring: str
    require_signed: bool
    checkpoints: CheckpointsJson
    by_status: dict[str, int]
    invalid_checkpoints: list[InvalidCheckpointJson]
    allow_unsigned: list[str]  # the keyring's allowances, as stated
    expired_by_retention: int  # signed streams the range does not hold, retention explains
    streams: list[StreamTrustJson]


@dataclass(frozen=True)
class SignedHeads:
    """What valid checkpoints signed, per stream: position → chain hash, and position →
    (when its checkpoint was appended (the broker's time, else the signer's), the time
    after which every position it newly covers was written: its producer's previous
    checkpoint's, or its own less twice its interval)."""

    positions: Mapping[StreamId, Mapping[int, str]]
    at_ms: Mapping[StreamId, Mapping[int, tuple[int, int]]] = field(default_factory=dict)


def signed_heads(chain: ChainReport) -> SignedHeads:
    out: dict[StreamId, dict[int, str]] = {}
    at: dict[StreamId, dict[int, tuple[int, int]]] = {}
    valid = [j for j in chain.judged if j.problem is None]
    when = {
        (j.checkpoint.producer_id, j.checkpoint.index): (
            j.checkpoint.at_ms if j.appended_ms is None else j.appended_ms
        )
        for j in valid
    }
    for judged in valid:
        checkpoint = judged.checkpoint
        appended = when[(checkpoint.producer_id, checkpoint.index)]
        # A chain that begins past index 0 (retention removed its predecessor): format 3
        # says when that predecessor was signed.
        floor = max(
            when.get((checkpoint.producer_id, checkpoint.index - 1), checkpoint.prev_at_ms),
            appended - 2 * checkpoint.interval_ms,
        )
        for head in checkpoint.heads:
            out.setdefault(head.stream, {})[head.sequence] = head.hash
            at.setdefault(head.stream, {})[head.sequence] = (appended, floor)
    return SignedHeads(out, at)


@dataclass(frozen=True)
class Removal:
    """What tells a removal retention explains from one it does not: ``now_ms`` and the
    topic's ``retention.ms`` (None: kept for ever), whether some partition's log start
    moved past 0, and whether the range runs from the log start to the end."""

    now_ms: int
    retention_ms: int | None
    moved: bool
    whole: bool

    def retention_explains(self, appended_ms: int) -> bool:
        """A signed position whose checkpoint was appended before now - retention.ms may
        have been removed by retention; a newer one cannot have been."""
        return (
            self.moved
            and self.retention_ms is not None
            and appended_ms <= self.now_ms - self.retention_ms
        )


@dataclass
class StreamFacts:
    """What the range shows of the streams, beyond their chain hashes at signed heads."""

    # The lowest position whose writer schema (hex) its producer's checkpoints do not name.
    unnamed_schema: Mapping[StreamId, tuple[int, str]] = field(default_factory=dict)
    # Streams first seen past position 0: that position.
    started_at: Mapping[StreamId, int] = field(default_factory=dict)
    # Unsigned candidates' record timestamps (first, last), for the keyring's allowances.
    times: Mapping[StreamId, tuple[int, int]] = field(default_factory=dict)


@dataclass
class TrustReport:
    keyring: str
    require_signed: bool
    chain: ChainReport
    not_checkpoints: int = 0
    streams: list[StreamTrustJson] = field(default_factory=list)
    allowances: tuple[UnsignedAllowance, ...] = ()
    expired_by_retention: int = 0

    def findings(self) -> list[Finding]:
        # An invalid checkpoint is a finding of its own, whatever streams it names (and
        # changes none of their statuses): where it was written is in the finding.
        found = [
            Finding(
                "invalid_checkpoint",
                f"checkpoint {j.checkpoint.index} of producer "
                f"{j.checkpoint.producer_id}: {j.problem}: {j.detail}"
                + ("" if j.offset is None else f" (checkpoints topic offset {j.offset})"),
                Where(producer_id=j.checkpoint.producer_id, checkpoint=j.checkpoint.index),
            )
            for j in self.chain.invalid()
        ]
        for s in self.streams:
            # Fail closed: with a keyring an unsigned stream is a finding, unless allowed.
            if s["status"] in FINDING_STATUSES or (s["status"] == "unsigned" and not s["allowed"]):
                where = stream_where((s["session_id"], s["producer_id"]))
                if s["signed_position"] is not None:
                    where["position"] = s["signed_position"]
                found.append(Finding(s["status"], s["detail"], where))
        return found

    def by_status(self) -> dict[str, int]:
        counts = Counter(s["status"] for s in self.streams)
        return {status: counts.get(status, 0) for status in STATUSES}

    def as_json(self) -> TrustJson:
        invalid = self.chain.invalid()
        return TrustJson(
            keyring=self.keyring,
            require_signed=self.require_signed,
            checkpoints=CheckpointsJson(
                read=len(self.chain.judged),
                valid=len(self.chain.judged) - len(invalid),
                invalid=len(invalid),
                not_checkpoints=self.not_checkpoints,
                closed_producers=len(self.chain.closed),
                started_after_retention=len(self.chain.started),
            ),
            by_status=self.by_status(),
            invalid_checkpoints=[
                InvalidCheckpointJson(
                    producer_id=j.checkpoint.producer_id,
                    index=j.checkpoint.index,
                    key_id=j.checkpoint.key_id,
                    problem=j.problem,
                    detail=j.detail,
                    streams=len(j.checkpoint.heads),
                    offset=j.offset,
                )
                for j in invalid[: EXAMPLES * 5]
                if j.problem is not None
            ],
            allow_unsigned=[a.describe() for a in self.allowances],
            expired_by_retention=self.expired_by_retention,
            streams=list(self.streams),
        )

    def human(self) -> str:
        counts = self.by_status()
        j = self.as_json()["checkpoints"]
        allowed = sum(s["allowed"] for s in self.streams)
        return (
            f"  signed checkpoints ({self.keyring}): {j['valid']} valid, {j['invalid']} "
            f"invalid; streams "
            + ", ".join(f"{k} {n}" for k, n in counts.items())
            + (f" ({allowed} unsigned allowed by the keyring)" if allowed else "")
            + ("; signatures required" if self.require_signed else "")
        )


def judge_streams(
    chain: ChainReport,
    *,
    keyring: str,
    require_signed: bool,
    observed: Mapping[StreamId, Mapping[int, Set[str]]],
    last_seen: Mapping[StreamId, int],
    to_end: bool,
    whole_stream: bool,
    not_checkpoints: int = 0,
    facts: StreamFacts | None = None,
    removal: Removal | None = None,
    allowances: tuple[UnsignedAllowance, ...] = (),
) -> TrustReport:
    """Each stream's trust status. ``observed``: the chain hashes the range holds at the
    signed positions; ``last_seen``: each stream's highest position in the range (v1/v2
    streams under producer ""); ``to_end``: the range reaches the end of the topic (a
    stream that ends before its signed head is truncated); ``whole_stream``: the range is
    the whole topic from offset 0 (a signed stream it does not hold at all is missing);
    ``removal``: how to tell a removal from retention (a range from a moved log start)."""
    heads = signed_heads(chain)
    signed, signed_at = heads.positions, heads.at_ms
    facts = facts or StreamFacts()
    signed_sessions = {stream[0] for stream in signed}
    report = TrustReport(keyring, require_signed, chain, not_checkpoints, [], allowances)
    for stream in sorted(set(last_seen) | set(signed)):
        last = last_seen.get(stream)
        if last is None:
            whole = whole_stream or (removal is not None and removal.whole)
            if not whole or not to_end:
                continue  # signed, but not in this range (read from a later start)
            # Its last position was written after its last signed head's floor.
            if removal is not None and all(
                removal.retention_explains(floor) for _, floor in signed_at.get(stream, {}).values()
            ):
                report.expired_by_retention += 1
                continue  # began, and ended, before retention
        if stream[1] == LEGACY_PRODUCER:
            report.streams.append(
                _legacy(stream, last, stream[0] in signed_sessions, require_signed, facts)
            )
            continue
        judged = _judge(
            stream,
            signed=signed.get(stream, {}),
            signed_at=signed_at.get(stream, {}),
            observed=observed.get(stream, {}),
            last=last,
            chain=chain,
            require_signed=require_signed,
            to_end=to_end,
            facts=facts,
            removal=removal,
        )
        if judged["status"] == "unsigned":
            judged["allowed"] = _allowed(stream, facts, allowances)
        report.streams.append(judged)
    return report


def _allowed(
    stream: StreamId, facts: StreamFacts, allowances: tuple[UnsignedAllowance, ...]
) -> bool:
    times = facts.times.get(stream)
    return any(a.allows(stream[1], times) for a in allowances)


def _legacy(
    stream: StreamId, last: int | None, in_signed_session: bool, required: bool, facts: StreamFacts
) -> StreamTrustJson:
    """A session's v1/v2 turns: no chain, nothing a checkpoint can sign."""
    if in_signed_session:
        status: Status = "forged"
        detail = "v1/v2 turns (no chain) inside a session a valid checkpoint signs"
    elif required:
        status, detail = "forged", "v1/v2 turns carry no chain: nothing signs them"
    else:
        status, detail = "unsigned", "v1/v2 turns carry no chain: nothing signs them"
    return StreamTrustJson(
        session_id=stream[0],
        producer_id=stream[1],
        status=status,
        signed_position=None,
        last_seen=last,
        unsigned_tail=0,
        detail=detail,
        allowed=False,
    )


def _judge(
    stream: StreamId,
    *,
    signed: Mapping[int, str],
    signed_at: Mapping[int, tuple[int, int]],
    observed: Mapping[int, Set[str]],
    last: int | None,
    chain: ChainReport,
    require_signed: bool,
    to_end: bool,
    facts: StreamFacts,
    removal: Removal | None,
) -> StreamTrustJson:
    forged: list[str] = []
    for position, digest in sorted(signed.items()):
        others = sorted(h for h in observed.get(position, ()) if h != digest)
        if others:
            forged.append(
                f"position {position} has chain hash {others[0][:16]}…, the signed "
                f"checkpoint says {digest[:16]}… (rewritten)"
            )
            break
    head = max(signed) if signed else None
    unnamed = facts.unnamed_schema.get(stream)
    if unnamed is not None and ((head is not None and unnamed[0] <= head) or require_signed):
        forged.append(
            f"position {unnamed[0]} is written with writer schema {unnamed[1]}, which no "
            "valid checkpoint of its producer names (re-framed)"
        )
    truncated = None
    if head is not None and to_end and (last is None or last < head):
        seen = "nothing" if last is None else f"position {last}"
        truncated = (
            f"the stream ends at {seen}, before its signed head {head}: "
            f"{head - (-1 if last is None else last)} signed position(s) missing"
        )
    start = facts.started_at.get(stream)
    covering = [p for p in signed if start is not None and p >= start - 1]
    if start is not None and truncated is None and covering:
        # The last removed position was written after ``floor`` (a signed head too: before
        # its checkpoint, after the one before): retention explains it only when that is
        # older than retention.ms.
        _, floor = signed_at.get(min(covering), (0, 0))
        if removal is None or not removal.retention_explains(floor):
            truncated = (
                f"the stream starts at position {start}: positions 0..{start - 1}, "
                f"covered by its signed head {min(covering)}, are removed, and retention "
                "cannot have removed them (written after now - retention.ms)"
            )
    if last is None and head is not None and truncated is not None:
        status_if_cut: Status = "missing"
    else:
        status_if_cut = "truncated"
    tail = 0 if last is None else last - (-1 if head is None else head)
    tail = max(0, tail)
    forged += _uncovered(stream, head, tail, chain, require_signed)
    status: Status
    if forged:
        status, detail = "forged", "; ".join(forged)
    elif truncated is not None:
        status, detail = status_if_cut, truncated
    elif head is None:
        status, detail = "unsigned", _unsigned(stream, chain)
    else:
        status = "signed"
        detail = f"consistent with its signed head {head}" + (
            f"; {tail} later position(s) unsigned (no final checkpoint)" if tail else ""
        )
    return StreamTrustJson(
        session_id=stream[0],
        producer_id=stream[1],
        status=status,
        signed_position=head,
        last_seen=last,
        unsigned_tail=tail,
        detail=detail,
        allowed=False,
    )


def _unsigned(stream: StreamId, chain: ChainReport) -> str:
    """Why no valid checkpoint names the stream."""
    if stream[1] not in chain.signing:
        return "no valid checkpoint names it (a publisher without a key)"
    return (
        "its producer signs, but no checkpoint names it: begun after the producer's last "
        "checkpoint, and the producer did not close cleanly"
        + (
            "; or named only by checkpoints removed before its producer's first one"
            if stream[1] in chain.started
            else ""
        )
    )


def _uncovered(
    stream: StreamId, head: int | None, tail: int, chain: ChainReport, require_signed: bool
) -> list[str]:
    """Why positions no valid checkpoint covers make the stream forged (none: they don't)."""
    closed = stream[1] in chain.closed
    if not tail or not (closed or require_signed):
        return []
    if head is None:
        why = (
            "its producer closed with a final checkpoint, and no checkpoint names this stream"
            if closed
            else "no valid checkpoint covers it, and the keyring requires signatures"
        )
        return [f"{why} ({tail} position(s))"]
    if closed:
        return [f"{tail} position(s) after its producer's final checkpoint (signed head {head})"]
    return [
        f"{tail} position(s) after its last signed head {head}, which no valid "
        "checkpoint covers (its producer did not close cleanly)"
    ]
