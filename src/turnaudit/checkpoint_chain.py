"""Judging signed checkpoints: each one's signature and key against the keyring, and its
place in its producer's chain (``prev`` names its predecessor's digest). A chain whose
beginning retention removed begins at its first retained checkpoint when what is gone is
older than the turn topic's retention (``RetentionStart``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from turnaudit.checkpoints import Checkpoint, signature_holds
from turnaudit.identity import GENESIS_HASH
from turnaudit.keyring import Keyring, millis_time

Problem = Literal["bad_signature", "unknown_key", "key_not_valid", "chain_break"]


@dataclass(frozen=True)
class Judged:
    """A checkpoint as read, and what is wrong with it (None: valid)."""

    checkpoint: Checkpoint
    problem: Problem | None
    detail: str = ""
    offset: int | None = None  # where it was written on the checkpoints topic
    appended_ms: int | None = None  # when the broker appended it (LogAppendTime)


def judge_signature(
    checkpoint: Checkpoint, keyring: Keyring, appended_ms: int | None = None
) -> Judged:
    """Valid when a key of the keyring, valid at the signing time (and at the time the
    broker appended the record, when known), verifies the signature."""
    entry = keyring.keys.get(checkpoint.key_id)
    if entry is None:
        return Judged(checkpoint, "unknown_key", f"key {checkpoint.key_id!r} is not in the keyring")
    for moment_ms, what in ((checkpoint.at_ms, "signed"), (appended_ms, "appended")):
        if moment_ms is not None and not entry.valid_at(millis_time(moment_ms)):
            return Judged(
                checkpoint,
                "key_not_valid",
                f"{what} at "
                f"{millis_time(moment_ms).isoformat()}, outside key "
                f"{checkpoint.key_id!r}'s validity",
            )
    if not signature_holds(checkpoint, entry.public_key):
        return Judged(checkpoint, "bad_signature", "the signature does not verify")
    return Judged(checkpoint, None)


@dataclass(frozen=True)
class ChainReport:
    """Every checkpoint judged: signature, key, and its place in its producer's chain."""

    judged: tuple[Judged, ...]
    # Producers each of whose chains ends with a final checkpoint (a clean close).
    closed: frozenset[str]
    # Producers with at least one valid checkpoint.
    signing: frozenset[str] = frozenset()
    # Producers whose chain begins past index 0: retention removed its beginning.
    started: frozenset[str] = frozenset()

    def valid(self) -> list[Checkpoint]:
        return [j.checkpoint for j in self.judged if j.problem is None]

    def invalid(self) -> list[Judged]:
        return [j for j in self.judged if j.problem is not None]

    def named_schemas(self) -> dict[str, frozenset[str]]:
        """Per producer whose valid checkpoints name writer schemas (format 2), every
        fingerprint (hex) they name. A producer with format 1 checkpoints only is absent:
        its turns are not held to schemas it never named."""
        named: dict[str, set[str]] = {}
        for checkpoint in self.valid():
            if checkpoint.format >= 2:
                named.setdefault(checkpoint.producer_id, set()).update(checkpoint.schemas)
        return {p: frozenset(s) for p, s in named.items()}


@dataclass(frozen=True, slots=True)
class ChainLink:
    """What a chain's next checkpoint must name: its producer, index and digest."""

    producer_id: str
    index: int
    digest: str


def link_of(checkpoint: Checkpoint) -> ChainLink:
    return ChainLink(checkpoint.producer_id, checkpoint.index, checkpoint.digest())


def follows(checkpoint: Checkpoint, before: ChainLink | None) -> bool:
    """Whether ``checkpoint`` continues its producer's chain from ``before`` (the
    checkpoint its ``prev`` names, None when there is none): index 0 names GENESIS, any
    other names its own producer's checkpoint of the index before."""
    if checkpoint.index == 0:
        return checkpoint.prev == GENESIS_HASH
    return (
        before is not None
        and before.digest == checkpoint.prev
        and before.producer_id == checkpoint.producer_id
        and before.index == checkpoint.index - 1
    )


@dataclass(frozen=True)
class RetentionStart:
    """When a producer's chain may begin past index 0: the checkpoints before its first
    retained one are gone, and are older than the turn topic's retention.

    Those checkpoints signed turns written before they were signed, so before now -
    ``retention_ms``: retention may have removed every one of those turns, and one it has
    not removed is judged without them (no retained checkpoint covers it: unsigned, or
    forged with signatures required). Removing them gains nobody anything. A predecessor
    signed later cannot have gone for retention's sake: its successor breaks the chain.
    ``retention_ms``: the turn topic's ``retention.ms`` (None: turns kept for ever, so no
    chain begins late); ``now_ms``: the clock; ``log_start_moved``: the checkpoints
    topic's log start is past 0 (something was removed from it)."""

    retention_ms: int | None
    now_ms: Callable[[], int]
    log_start_moved: bool = True

    def explains(self, checkpoint: Checkpoint) -> bool:
        if checkpoint.index == 0 or self.retention_ms is None or not self.log_start_moved:
            return False
        return predecessor_signed_by(checkpoint) <= self.now_ms() - self.retention_ms

    def may_have_removed(self, written_by_ms: int) -> bool:
        """Whether retention may have removed a turn written by ``written_by_ms``."""
        return self.retention_ms is not None and written_by_ms <= self.now_ms() - self.retention_ms

    def resumes(self, checkpoint: Checkpoint, after: int) -> bool:
        """Whether a chain read to index ``after`` (-1: none of it) resumes at
        ``checkpoint`` past a hole retention explains (the follower's rule: it cannot tell
        a beginning removed while it was away from a middle; a hole of checkpoints all
        signed before now - retention.ms is harmless either way)."""
        return checkpoint.index > after + 1 and self.explains(checkpoint)


# No retention: every chain is read from its index 0.
KEPT_FOR_EVER = RetentionStart(None, lambda: 0, log_start_moved=False)


def predecessor_signed_by(checkpoint: Checkpoint) -> int:
    """The latest time the checkpoint before ``checkpoint`` in its chain can have been
    signed: format 3 says (``prev_at_ms``); before it, no later than ``checkpoint``."""
    return checkpoint.prev_at_ms if checkpoint.format >= 3 else checkpoint.at_ms


def judge_chain(
    read: Sequence[tuple[Checkpoint, int | None]],
    keyring: Keyring,
    offsets: Mapping[str, int] | None = None,
    start: RetentionStart | None = None,
) -> ChainReport:
    """Judge each (checkpoint, broker append time) read. A checkpoint with a valid
    signature whose ``prev`` names no checkpoint read (not GENESIS at index 0, or an
    index that is not its predecessor's plus one) breaks its chain: a checkpoint before
    it was removed; unless it is the first of its producer read and ``start`` (retention)
    explains what is gone before it: its chain begins there (its producer in
    ``ChainReport.started``). Copies of one checkpoint (same digest) count once.
    ``offsets``: where each (by digest) was read on the checkpoints topic, for the
    report."""
    offsets = offsets or {}
    seen: dict[str, Checkpoint] = {}
    appended: dict[str, int | None] = {}
    for checkpoint, at in read:
        digest = checkpoint.digest()
        if digest not in seen:
            seen[digest] = checkpoint
            appended[digest] = at
    signed = {
        digest: replace(
            judge_signature(checkpoint, keyring, appended[digest]),
            offset=offsets.get(digest),
            appended_ms=appended[digest],
        )
        for digest, checkpoint in seen.items()
    }
    first: dict[str, int] = {}  # per producer, the lowest index whose signature holds
    for verdict in signed.values():
        if verdict.problem is None:
            c = verdict.checkpoint
            first[c.producer_id] = min(c.index, first.get(c.producer_id, c.index))
    successors: set[str] = set()
    started: set[str] = set()
    judged: list[Judged] = []
    for digest, checkpoint in seen.items():
        verdict = signed[digest]
        if verdict.problem is None:
            before = seen.get(checkpoint.prev)
            if follows(checkpoint, None if before is None else link_of(before)):
                successors.add(checkpoint.prev)
            elif (
                before is None
                and start is not None
                and checkpoint.index == first[checkpoint.producer_id]
                and start.explains(checkpoint)
            ):
                started.add(checkpoint.producer_id)  # its predecessors went with retention
            else:
                verdict = _chain_break(verdict, _why_not_started(checkpoint, before, first, start))
        judged.append(verdict)
    # A chain's last checkpoint: valid, and no valid checkpoint names it as predecessor.
    ends: dict[str, list[bool]] = {}
    for j in judged:
        if j.problem is None and j.checkpoint.digest() not in successors:
            ends.setdefault(j.checkpoint.producer_id, []).append(j.checkpoint.final)
    closed = frozenset(p for p, finals in ends.items() if all(finals))
    return ChainReport(tuple(judged), closed, frozenset(ends), frozenset(started))


def _why_not_started(
    checkpoint: Checkpoint,
    before: Checkpoint | None,
    first: Mapping[str, int],
    start: RetentionStart | None,
) -> str:
    if start is None or before is not None or checkpoint.index == 0:
        return "removed, or never signed"
    if checkpoint.index != first[checkpoint.producer_id]:
        return "removed from the middle of the chain: retention removes only its beginning"
    return (
        "removed, or never signed; retention cannot have removed it: signed after now - "
        "retention.ms, turns kept for ever, or the checkpoints topic's log start at 0"
    )


def _chain_break(verdict: Judged, why: str) -> Judged:
    c = verdict.checkpoint
    return Judged(
        c,
        "chain_break",
        f"checkpoint {c.index} of producer {c.producer_id} names a predecessor that is not "
        f"there ({why})",
        verdict.offset,
        verdict.appended_ms,
    )
