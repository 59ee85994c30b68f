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
  the end of the topic).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from turnaudit.checkpoints import ChainReport, Problem
from turnaudit.identity import LEGACY_PRODUCER, StreamId
from turnaudit.verify.findings import EXAMPLES, Finding, Where, stream_where

Status = Literal["signed", "unsigned", "forged", "truncated"]
STATUSES: tuple[Status, ...] = ("signed", "unsigned", "forged", "truncated")


class StreamTrustJson(TypedDict):
    session_id: str
    producer_id: str
    status: Status
    signed_position: int | None  # the highest position a valid checkpoint signed
    last_seen: int | None  # the highest position the range holds
    unsigned_tail: int  # positions after the signed head (no finding unless required)
    detail: str


class InvalidCheckpointJson(TypedDict):
    producer_id: str
    index: int
    key_id: str
    problem: Problem
    detail: str
    streams: int


class CheckpointsJson(TypedDict):
    read: int
    valid: int
    invalid: int
    not_checkpoints: int  # records on the topic that are not checkpoints
    closed_producers: int  # producers whose chains end with a final checkpoint


class TrustJson(TypedDict):
    keyring: str
    require_signed: bool
    checkpoints: CheckpointsJson
    by_status: dict[str, int]
    invalid_checkpoints: list[InvalidCheckpointJson]
    streams: list[StreamTrustJson]


@dataclass(frozen=True)
class SignedHeads:
    """What valid checkpoints signed, per stream: position → chain hash."""

    positions: Mapping[StreamId, Mapping[int, str]]


def signed_heads(chain: ChainReport) -> SignedHeads:
    out: dict[StreamId, dict[int, str]] = {}
    for checkpoint in chain.valid():
        for head in checkpoint.heads:
            out.setdefault(head.stream, {})[head.sequence] = head.hash
    return SignedHeads(out)


@dataclass
class TrustReport:
    keyring: str
    require_signed: bool
    chain: ChainReport
    not_checkpoints: int = 0
    streams: list[StreamTrustJson] = field(default_factory=list)

    def findings(self) -> list[Finding]:
        # An invalid checkpoint is a finding of its own, whatever streams it names: a
        # chain broken before a checkpoint that names none (a final one, written when
        # nothing had advanced) still shows that a checkpoint was removed.
        found = [
            Finding(
                "invalid_checkpoint",
                f"checkpoint {j.checkpoint.index} of producer "
                f"{j.checkpoint.producer_id}: {j.problem}: {j.detail}",
                Where(producer_id=j.checkpoint.producer_id, checkpoint=j.checkpoint.index),
            )
            for j in self.chain.invalid()
        ]
        for s in self.streams:
            if s["status"] in ("forged", "truncated"):
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
                )
                for j in invalid[: EXAMPLES * 5]
                if j.problem is not None
            ],
            streams=list(self.streams),
        )

    def human(self) -> str:
        counts = self.by_status()
        j = self.as_json()["checkpoints"]
        return (
            f"  signed checkpoints ({self.keyring}): {j['valid']} valid, {j['invalid']} "
            f"invalid; streams "
            + ", ".join(f"{k} {n}" for k, n in counts.items())
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
) -> TrustReport:
    """Each chained stream's trust status. ``observed``: the chain hashes the range holds
    at the signed positions; ``last_seen``: each stream's highest position in the range;
    ``to_end``: the range reaches the end of the topic (a stream that ends before its
    signed head is truncated); ``whole_stream``: the range is the whole topic from offset
    0 (a signed stream it does not hold at all is truncated, not merely out of range)."""
    signed = signed_heads(chain).positions
    bad: dict[StreamId, str] = {}
    for judged in chain.invalid():
        c = judged.checkpoint
        for stream in c.streams():
            bad.setdefault(
                stream,
                f"checkpoint {c.index} of producer {c.producer_id} "
                f"(key {c.key_id!r}) that names it is not valid: {judged.detail}",
            )
    report = TrustReport(keyring, require_signed, chain, not_checkpoints)
    streams = set(last_seen) | set(signed) | set(bad)
    for stream in sorted(s for s in streams if s[1] != LEGACY_PRODUCER):
        last = last_seen.get(stream)
        if last is None and not whole_stream:
            continue  # signed, but not in this range (read from a later start)
        report.streams.append(
            _judge(
                stream,
                signed=signed.get(stream, {}),
                bad=bad.get(stream),
                observed=observed.get(stream, {}),
                last=last,
                chain=chain,
                require_signed=require_signed,
                to_end=to_end,
            )
        )
    return report


def _judge(
    stream: StreamId,
    *,
    signed: Mapping[int, str],
    bad: str | None,
    observed: Mapping[int, Set[str]],
    last: int | None,
    chain: ChainReport,
    require_signed: bool,
    to_end: bool,
) -> StreamTrustJson:
    forged: list[str] = [] if bad is None else [bad]
    for position, digest in sorted(signed.items()):
        others = sorted(h for h in observed.get(position, ()) if h != digest)
        if others:
            forged.append(
                f"position {position} has chain hash {others[0][:16]}…, the signed "
                f"checkpoint says {digest[:16]}… (rewritten)"
            )
            break
    head = max(signed) if signed else None
    truncated = None
    if head is not None and to_end and (last is None or last < head):
        seen = "nothing" if last is None else f"position {last}"
        truncated = (
            f"the stream ends at {seen}, before its signed head {head}: "
            f"{head - (-1 if last is None else last)} signed position(s) missing"
        )
    tail = 0 if last is None else last - (-1 if head is None else head)
    tail = max(0, tail)
    if bad is None:
        forged += _uncovered(stream, head, tail, chain, require_signed)
    status: Status
    if forged:
        status, detail = "forged", "; ".join(forged)
    elif truncated is not None:
        status, detail = "truncated", truncated
    elif head is None:
        status = "unsigned"
        detail = (
            "its producer signs, but no checkpoint names it: begun after the "
            "producer's last checkpoint, and the producer did not close cleanly"
            if stream[1] in chain.signing
            else "no checkpoint names it (a publisher without a key)"
        )
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
