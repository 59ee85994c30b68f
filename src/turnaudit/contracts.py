"""The contracts the pipeline checks on every event (PIPELINE.md, contracts 1-7).

Checks 1-4 look at one event (a decoded Avro record, any shipped version);
6 (``check_key``) at the event and its Kafka key; 5 and 7 need the history of
an ordered stream and live in ``turnaudit.identity.StreamTracker`` (its
result becomes a breach through ``identity_breach``). ``SessionSequenceTracker``
is the earlier per-session check, which cannot tell a restarted publisher
from a redelivery.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnaudit.events import OutgoingTurnEvent, TurnEvent
from turnaudit.identity import TrackResult, TurnOutcome
from turnaudit.serialization.native import ContractCheck
from turnaudit.verdicts import (
    UNKNOWN_DOMAIN_SURFACE,
    OutputPolicy,
    RiskTier,
    TurnPath,
    Verdict,
)


class Contract(enum.StrEnum):
    """Closed set of contract names: used as metric labels and DLQ reasons."""

    REFUSAL_HEDGE_EXCLUSIVE = "refusal_hedge_exclusive"
    STUB_FIELDS = "stub_fields"
    OUTPUT_POLICY_DERIVED = "output_policy_derived"
    BUNDLE_MATCHES_FIELDS = "bundle_matches_fields"
    VERDICT_SPLIT_PATHS = "verdict_split_paths"
    SEQUENCE = "sequence"
    KEY_IS_SESSION_ID = "key_is_session_id"  # contract 6
    CHAIN = "chain"  # contract 7: identity and hash chain of an ordered stream


@dataclass(frozen=True, slots=True)
class Breach:
    contract: Contract
    detail: str

    def __str__(self) -> str:
        return f"{self.contract.value}: {self.detail}"


# The decoders still hand plain dicts (``Mapping[str, Any]``) to some readers.
CheckedEvent = TurnEvent | OutgoingTurnEvent | Mapping[str, Any]


def check_event(event: CheckedEvent) -> list[Breach]:
    """Contracts 1-4 on one event, decoded (``TurnEvent``) or built by a runtime
    (``OutgoingTurnEvent``); an empty list means the event keeps them all.

    The rule is the crate's (``native/src/verify/contracts.rs``), the one verify's native
    step applies to a scanned record too; this module hands it the event and its own
    constants (``CONTRACT_RULE``). In order: refusal and hedge exclusive (1); a stub turn's
    fields (2); an action assessment's verdict split and derived output policy (3); the
    per-field verdicts equal to the bundle's (4), the identity score only for a v2 bundle.
    A field the rule reads missing raises ``KeyError``, as indexing the event would."""
    return CONTRACT_RULE(event)


def check_key(key: bytes | None, event: Mapping[str, Any]) -> Breach | None:
    """Contract 6: the Kafka key is the event's session id (per-session order rests on it)."""
    session = event["session_id"]
    if key is None:
        return Breach(Contract.KEY_IS_SESSION_ID, f"message has no key; session id is {session!r}")
    if key != session.encode():
        shown = key[:80].decode(errors="replace")
        return Breach(
            Contract.KEY_IS_SESSION_ID, f"key {shown!r} is not the session id {session!r}"
        )
    return None


def identity_breach(result: TrackResult) -> Breach | None:
    """Contract 7: an event id with other content, a taken position, a broken chain."""
    if result.outcome is TurnOutcome.CONTENT_CHANGED:
        return Breach(
            Contract.CHAIN,
            f"event id seen before with other content (position "
            f"{result.sequence} of session {result.stream[0]})",
        )
    if result.outcome is TurnOutcome.POSITION_REUSED or result.chain_break:
        return Breach(Contract.CHAIN, result.chain_break or "position reused")
    return None


# The per-field verdicts that must equal the bundle's (contract 4), by schema version:
# v2 events carry verdicts only in the bundle, but for identity_score.
PER_FIELD_VERDICTS = ("identity_score", "safety_verdict", "ethics_verdict")
V2_PER_FIELD_VERDICTS = ("identity_score",)

# Contracts 1-4, the crate's rule with this package's constants: ``check_event`` and
# verify's native step (``turnaudit.verify.native_step``) both call it.
CONTRACT_RULE = ContractCheck(
    stub_path=TurnPath.STUB,
    unknown_surface=UNKNOWN_DOMAIN_SURFACE,
    per_field=PER_FIELD_VERDICTS,
    v2_per_field=V2_PER_FIELD_VERDICTS,
    void_tiers=(RiskTier.RED, RiskTier.CRITICAL),
    void=Verdict.VOID,
    hold=Verdict.HOLD,
    policies=(OutputPolicy.DOMAIN_SEAL, OutputPolicy.DOMAIN_HOLD, OutputPolicy.DOMAIN_VOID),
    breach=Breach,
    contracts=(
        Contract.REFUSAL_HEDGE_EXCLUSIVE,
        Contract.STUB_FIELDS,
        Contract.VERDICT_SPLIT_PATHS,
        Contract.OUTPUT_POLICY_DERIVED,
        Contract.BUNDLE_MATCHES_FIELDS,
    ),
)


class SequenceOutcome(enum.StrEnum):
    IN_ORDER = "in_order"
    # A number seen before: an at-least-once redelivery. Not counted twice.
    DUPLICATE = "duplicate"
    GAP = "gap"  # numbers were skipped: turns are missing (so far)
    # A number a gap had skipped, arriving after all: it fills the gap.
    LATE = "late"


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    outcome: SequenceOutcome
    missing: int = 0  # how many sequence numbers a gap skipped

    @property
    def counts_as_turn(self) -> bool:
        return self.outcome is not SequenceOutcome.DUPLICATE

    @property
    def redelivered(self) -> bool:
        return self.outcome is SequenceOutcome.DUPLICATE


@dataclass
class _SessionState:
    next: int
    partition: int | None
    missing: set[int]


class SessionSequenceTracker:
    """Contract 5: per session, sequence numbers come without gaps or reordering.

    A number below the next expected one is a redelivery (DUPLICATE) unless a
    gap had skipped it, in which case it is LATE and fills the gap. Memory is
    bounded: at most ``max_sessions`` sessions (least recently seen evicted)
    and ``max_missing`` remembered holes per session.
    """

    def __init__(self, max_sessions: int = 100_000, max_missing: int = 1_000) -> None:
        # Least recently seen first; the oldest is dropped in O(1) at the bound.
        self._sessions: OrderedDict[str, _SessionState] = OrderedDict()
        self._max_sessions = max_sessions
        self._max_missing = max_missing

    def observe(
        self, session_id: str, sequence: int, partition: int | None = None
    ) -> SequenceCheck:
        state = self._sessions.get(session_id)
        if state is not None:
            self._sessions.move_to_end(session_id)  # most recently seen last
        if state is None:
            # First sight of the session in this consumer: a stream read from
            # the start begins at 0; one joined mid-way starts where it is.
            state = _SessionState(sequence + 1, partition, set())
            outcome = SequenceCheck(SequenceOutcome.IN_ORDER)
        elif sequence == state.next:
            state.next += 1
            outcome = SequenceCheck(SequenceOutcome.IN_ORDER)
        elif sequence > state.next:
            skipped = range(state.next, sequence)
            if len(state.missing) + len(skipped) <= self._max_missing:
                state.missing.update(skipped)
            state.next = sequence + 1
            outcome = SequenceCheck(SequenceOutcome.GAP, missing=len(skipped))
        elif sequence in state.missing:
            state.missing.discard(sequence)
            outcome = SequenceCheck(SequenceOutcome.LATE)
        else:
            outcome = SequenceCheck(SequenceOutcome.DUPLICATE)
        self._sessions.setdefault(session_id, state)  # a new session goes last
        if len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return outcome

    def forget_partitions(self, partitions: set[int]) -> None:
        """Drop sessions read from these partitions (they moved to another
        consumer; what it processed meanwhile is unknown here)."""
        self._sessions = OrderedDict(
            (s, st) for s, st in self._sessions.items() if st.partition not in partitions
        )

    def __len__(self) -> int:
        return len(self._sessions)
