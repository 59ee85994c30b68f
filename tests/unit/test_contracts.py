"""PIPELINE.md contracts 1-5: each breach is detected, valid events pass."""

from __future__ import annotations

import copy
from typing import Any

from turnaudit.contracts import Contract, SequenceOutcome, SessionSequenceTracker, check_event
from turnaudit.producers.simulator import TurnRuntimeSimulator


def sample(version: int, *, stub: bool = False, action: bool = False) -> dict[str, Any]:
    for event in TurnRuntimeSimulator(11, schema_versions=(version,)).events(3000):
        if (event["path"] == "STUB") == stub and (event["action_assessment"] is not None) == action:
            return copy.deepcopy(event)
    raise AssertionError("the simulator produced no such event")


def contracts(event: dict[str, Any]) -> list[Contract]:
    return [b.contract for b in check_event(event)]


def test_simulated_events_keep_every_contract() -> None:
    for event in TurnRuntimeSimulator(3, schema_versions=(1, 2)).events(2000):
        assert check_event(event) == []


def test_contract_1_refusal_and_hedge_both_true() -> None:
    event = sample(2)
    event["verdicts"]["refusal_emitted"] = event["verdicts"]["hedge_injected"] = True
    assert contracts(event) == [Contract.REFUSAL_HEDGE_EXCLUSIVE]


def test_contract_2_stub_with_main_path_values() -> None:
    for field, value in [("cycle_cost_total", 1.5), ("vault_hits", 2), ("flagged", True)]:
        event = sample(2, stub=True)
        event[field] = value
        breaches = check_event(event)
        assert [b.contract for b in breaches] == [Contract.STUB_FIELDS]
        assert field in breaches[0].detail
    event = sample(2, stub=True)
    event["verdicts"]["hedge_injected"] = True
    assert Contract.STUB_FIELDS in contracts(event)


def test_contract_3_hard_coded_output_policy() -> None:
    event = sample(2, action=True)
    event["action_assessment"].update(risk_tier="CRITICAL", output_policy="DOMAIN_SEAL")
    breaches = check_event(event)
    assert [b.contract for b in breaches] == [Contract.OUTPUT_POLICY_DERIVED]
    assert "DOMAIN_VOID" in breaches[0].detail


def test_contract_4_bundle_and_back_compat_fields_disagree() -> None:
    event = sample(1)
    event["safety_verdict"] = {"passed": False, "violated_boundary_ids": ["weapons"]}
    assert contracts(event) == [Contract.BUNDLE_MATCHES_FIELDS]
    event = sample(2)
    event["identity_score"] = {"score": 0.1, "threshold": 0.5}
    assert contracts(event) == [Contract.BUNDLE_MATCHES_FIELDS]


def test_contract_5_sequence_gaps_and_redeliveries() -> None:
    tracker = SessionSequenceTracker()
    outcomes = [tracker.observe("a", n).outcome for n in (0, 1, 2, 2, 1, 3, 6, 4, 4, 7, 5)]
    assert outcomes == [
        SequenceOutcome.IN_ORDER,
        SequenceOutcome.IN_ORDER,
        SequenceOutcome.IN_ORDER,
        SequenceOutcome.DUPLICATE,
        SequenceOutcome.DUPLICATE,
        SequenceOutcome.IN_ORDER,
        SequenceOutcome.GAP,
        SequenceOutcome.LATE,  # 4 was skipped by the gap: it arrives late, not twice
        SequenceOutcome.DUPLICATE,  # and now it has been seen
        SequenceOutcome.IN_ORDER,
        SequenceOutcome.LATE,
    ]
    assert tracker.observe("b", 0).outcome is SequenceOutcome.IN_ORDER
    gap = SessionSequenceTracker()
    gap.observe("s", 0)
    assert gap.observe("s", 4).missing == 3


def test_sequence_tracker_memory_is_bounded() -> None:
    tracker = SessionSequenceTracker(max_sessions=10)
    for i in range(100):
        tracker.observe(f"s{i}", 0)
    assert len(tracker) == 10
    assert tracker.observe("s99", 1).outcome is SequenceOutcome.IN_ORDER  # recent ones kept


def test_sessions_of_a_revoked_partition_are_forgotten() -> None:
    tracker = SessionSequenceTracker()
    tracker.observe("a", 0, partition=1)
    tracker.observe("b", 0, partition=2)
    tracker.forget_partitions({1})
    # Another consumer handled a's turns 1..9 meanwhile: no false gap on return.
    assert tracker.observe("a", 10, partition=1).outcome is SequenceOutcome.IN_ORDER
    assert tracker.observe("b", 5, partition=2).outcome is SequenceOutcome.GAP


def test_contract_2_every_row_of_the_stub_table() -> None:
    for field, value in [
        ("walk_surface", "walk:triage"),
        ("articulation_surface", "Take 200mg."),
        ("surface", "Take 200mg."),
        ("input_tokens", []),
    ]:
        event = sample(2, stub=True)
        event[field] = value
        breaches = check_event(event)
        assert [b.contract for b in breaches] == [Contract.STUB_FIELDS], field
        assert field in breaches[0].detail


def test_verdict_split_paths_injection_and_critic_unavailable() -> None:
    event = sample(2, action=True)
    event["action_assessment"].update(
        injection_detected=True,
        execution_verdict="SEAL",
        action_risk_verdict="VOID",
        risk_tier="LOW",
        human_decision_required=False,
        output_policy="DOMAIN_VOID",
    )
    assert contracts(event) == [Contract.VERDICT_SPLIT_PATHS]
    event = sample(2, action=True)
    event["action_assessment"].update(
        critic_available=False,
        execution_verdict="SEAL",
        action_risk_verdict="HOLD",
        risk_tier="LOW",
        human_decision_required=False,
        output_policy="DOMAIN_HOLD",
    )
    assert contracts(event) == [Contract.VERDICT_SPLIT_PATHS]
