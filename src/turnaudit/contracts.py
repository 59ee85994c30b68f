"""The contracts the pipeline checks on every event (PIPELINE.md, contracts 1-5).

Checks 1-4 look at one event (a decoded Avro record, any shipped version);
check 5 needs the history of a session and lives in ``SessionSequenceTracker``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnaudit.verdicts import derive_output_policy


class Contract(enum.StrEnum):
    """Closed set of contract names: used as metric labels and DLQ reasons."""

    REFUSAL_HEDGE_EXCLUSIVE = "refusal_hedge_exclusive"
    STUB_FIELDS = "stub_fields"
    OUTPUT_POLICY_DERIVED = "output_policy_derived"
    BUNDLE_MATCHES_FIELDS = "bundle_matches_fields"
    SEQUENCE = "sequence"


@dataclass(frozen=True, slots=True)
class Breach:
    contract: Contract
    detail: str

    def __str__(self) -> str:
        return f"{self.contract.value}: {self.detail}"


def check_event(event: Mapping[str, Any]) -> list[Breach]:
    """Contracts 1-4 on one event; an empty list means the event keeps them all."""
    breaches: list[Breach] = []
    bundle = event["verdicts"]
    if bundle["refusal_emitted"] and bundle["hedge_injected"]:
        breaches.append(
            Breach(Contract.REFUSAL_HEDGE_EXCLUSIVE, "refusal_emitted and hedge_injected both true")
        )
    if event["path"] == "STUB":
        wrong = [
            name
            for name, ok in (
                ("hedge_injected", bundle["hedge_injected"] is False),
                ("identity_score", event["identity_score"] is None),
                ("bundle.identity_score", bundle["identity_score"] is None),
                ("cycle_cost_total", event["cycle_cost_total"] == 0.0),
                ("vault_hits", event["vault_hits"] == 0),
                ("flagged", event["flagged"] is False),
            )
            if not ok
        ]
        if wrong:
            breaches.append(Breach(Contract.STUB_FIELDS, "stub turn with " + ", ".join(wrong)))
    action = event.get("action_assessment")
    if action is not None:
        expected = derive_output_policy(
            action["risk_tier"], action["action_risk_verdict"], action["human_decision_required"]
        )
        if action["output_policy"] != expected:
            breaches.append(
                Breach(
                    Contract.OUTPUT_POLICY_DERIVED,
                    f"output_policy {action['output_policy']} but the rule gives {expected.value}",
                )
            )
    mismatched = [
        name
        for name in ("identity_score", "safety_verdict", "ethics_verdict")
        # v2 events carry verdicts only in the bundle; v1 and the event's own
        # identity_score field must agree with it.
        if name in event and event[name] != bundle[name]
    ]
    if mismatched:
        breaches.append(
            Breach(Contract.BUNDLE_MATCHES_FIELDS, "bundle differs from " + ", ".join(mismatched))
        )
    return breaches


class SequenceOutcome(enum.StrEnum):
    IN_ORDER = "in_order"
    # A number at or below the last one seen. Kafka keeps order per partition
    # and the key is the session, so this is an at-least-once redelivery.
    DUPLICATE = "duplicate"
    GAP = "gap"  # numbers were skipped: turns are missing


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    outcome: SequenceOutcome
    missing: int = 0  # how many sequence numbers a gap skipped


class SessionSequenceTracker:
    """Contract 5: per session, sequence numbers come without gaps or reordering.

    Redeliveries of an already seen number are explained (at-least-once) and
    reported as duplicates, not as breaches; a gap is a breach. Memory is bounded by evicting the
    least recently seen sessions beyond ``max_sessions``.
    """

    def __init__(self, max_sessions: int = 100_000) -> None:
        self._next: dict[str, int] = {}
        self._max_sessions = max_sessions

    def observe(self, session_id: str, sequence: int) -> SequenceCheck:
        expected = self._next.pop(session_id, None)
        if expected is None:
            # First sight of the session in this consumer: a stream read from
            # the start begins at 0; one joined mid-way starts where it is.
            outcome = SequenceCheck(SequenceOutcome.IN_ORDER)
            self._next[session_id] = sequence + 1
        elif sequence == expected:
            outcome = SequenceCheck(SequenceOutcome.IN_ORDER)
            self._next[session_id] = sequence + 1
        elif sequence > expected:
            outcome = SequenceCheck(SequenceOutcome.GAP, missing=sequence - expected)
            self._next[session_id] = sequence + 1
        else:
            outcome = SequenceCheck(SequenceOutcome.DUPLICATE)
            self._next[session_id] = expected
        if len(self._next) > self._max_sessions:
            del self._next[next(iter(self._next))]
        return outcome
