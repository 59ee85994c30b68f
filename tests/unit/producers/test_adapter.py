"""ADR-0039's Verification section, on the runtime adapter."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.support.turns import main_turn_kwargs
from turnaudit.contracts import Breach, Contract, check_event
from turnaudit.producers.adapter import (
    UNKNOWN_DOMAIN_SURFACE,
    RuntimeInfo,
    TurnAuditEmitter,
    TurnContext,
    TurnEventBuilder,
    inject_hedge,
)
from turnaudit.verdicts import (
    ActionAssessment,
    EthicsVerdict,
    RiskTier,
    SafetyVerdict,
    TurnVerdicts,
    Verdict,
)

HEDGE = "I may be wrong, but"
CTX = TurnContext("sess-1", "medical", "triage", turn=3)


def builder(version: int = 2) -> TurnEventBuilder:
    return TurnEventBuilder(RuntimeInfo("runtime", "9.9", "i-1"), version)


def main_turn(b: TurnEventBuilder, **over: Any) -> dict[str, Any]:
    kwargs = main_turn_kwargs(**over)
    return b.main_turn(CTX, **kwargs)


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def publish(self, event: dict[str, Any]) -> str:
        self.events.append(event)
        return f"id-{len(self.events)}"


# -- bundle shape -------------------------------------------------------------


def test_bundle_is_frozen_and_slotted() -> None:
    bundle = TurnVerdicts(None, None, None, refusal_emitted=False, hedge_injected=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bundle.hedge_injected = True  # type: ignore[misc]  # frozen: the assignment must fail
    assert not hasattr(bundle, "__dict__")
    assert [f.name for f in dataclasses.fields(TurnVerdicts)] == [
        "identity_score",
        "safety_verdict",
        "ethics_verdict",
        "refusal_emitted",
        "hedge_injected",
    ]


@pytest.mark.parametrize("version", [1, 2])
def test_every_event_carries_the_bundle_with_its_schema_version(version: int) -> None:
    event = main_turn(builder(version))
    bundle = event["verdicts"]
    assert bundle["schema_version"] == version
    assert bundle["safety_verdict"] == {"passed": True, "violated_boundary_ids": []}
    assert bundle["identity_score"] == {"score": 0.8, "threshold": 0.5}
    assert bundle["refusal_emitted"] is False
    assert bundle["hedge_injected"] is False


def test_v1_per_field_verdicts_agree_with_the_bundle() -> None:
    event = main_turn(builder(1), safety_verdict=SafetyVerdict(False, ("weapons",)))
    assert event["safety_verdict"] == event["verdicts"]["safety_verdict"]
    assert event["ethics_verdict"] == event["verdicts"]["ethics_verdict"]
    assert event["identity_score"] == event["verdicts"]["identity_score"]
    assert check_event(event) == []


def test_v2_has_no_per_field_verdicts() -> None:
    event = main_turn(builder(2))
    assert "safety_verdict" not in event
    assert "ethics_verdict" not in event
    assert event["tool_steps"] == []


# -- stub path ----------------------------------------------------------------


def test_stub_turn_records_adr_0039_table_values() -> None:
    event = builder().stub_turn(
        CTX,
        input_tokens=["bonjour"],
        versor_condition=2.25,
        safety_verdict=SafetyVerdict(True),
        ethics_verdict=EthicsVerdict(True),
    )
    assert event is not None
    assert event["path"] == "STUB"
    assert event["turn"] == CTX.turn
    assert event["input_tokens"] == ["bonjour"]
    assert event["surface"] == UNKNOWN_DOMAIN_SURFACE
    assert event["walk_surface"] == event["articulation_surface"] == UNKNOWN_DOMAIN_SURFACE
    assert event["identity_score"] is None
    assert event["verdicts"]["identity_score"] is None
    assert event["cycle_cost_total"] == 0.0
    assert event["vault_hits"] == 0
    assert event["versor_condition"] == 2.25
    assert event["flagged"] is False
    assert event["verdicts"]["safety_verdict"] == {"passed": True, "violated_boundary_ids": []}
    assert check_event(event) == []


def test_stub_turn_with_refusal_records_the_refusal_surface() -> None:
    event = builder().stub_turn(
        CTX,
        input_tokens=["x"],
        versor_condition=1.0,
        safety_verdict=SafetyVerdict(False, ("weapons",)),
        ethics_verdict=None,
        refusal_surface="[refusal] no.",
    )
    assert event is not None
    assert event["surface"] == "[refusal] no."
    assert event["walk_surface"] == UNKNOWN_DOMAIN_SURFACE
    assert event["verdicts"]["refusal_emitted"] is True
    assert event["verdicts"]["hedge_injected"] is False


def test_correct_fallback_without_tokens_emits_nothing() -> None:
    sink = RecordingSink()
    emitter = TurnAuditEmitter(sink, lambda e, b: pytest.fail("no breach expected"))
    for tokens in (None, []):
        event = builder().stub_turn(
            CTX, input_tokens=tokens, versor_condition=1.0, safety_verdict=None, ethics_verdict=None
        )
        assert event is None
        assert emitter.emit(event) is None
    assert sink.events == []


# -- refusal and hedge ----------------------------------------------------------


def test_refusal_flag_toggles_on_a_forced_safety_violation() -> None:
    calm = main_turn(builder())
    refused = main_turn(
        builder(1),
        safety_verdict=SafetyVerdict(False, ("medical-dosage",)),
        surface_before_hedge="[refusal] I can't advise on dosage.",
        surface="[refusal] I can't advise on dosage.",
        refusal_emitted=True,
    )
    assert calm["verdicts"]["refusal_emitted"] is False
    assert refused["verdicts"]["refusal_emitted"] is True
    assert refused["verdicts"]["safety_verdict"]["violated_boundary_ids"] == ["medical-dosage"]
    assert refused["safety_verdict"] == refused["verdicts"]["safety_verdict"]


def test_hedge_injected_true_only_when_the_surface_changed() -> None:
    hedged = main_turn(builder(), surface=inject_hedge("Take 200mg.", HEDGE))
    assert hedged["surface"] == f"{HEDGE} Take 200mg."
    assert hedged["verdicts"]["hedge_injected"] is True


def test_an_already_hedged_surface_is_not_an_injection() -> None:
    already = f"{HEDGE} Take 200mg."
    assert inject_hedge(already, HEDGE) == already  # idempotent on the prefix
    event = main_turn(builder(), surface_before_hedge=already, surface=inject_hedge(already, HEDGE))
    assert event["verdicts"]["hedge_injected"] is False


def test_hedge_injected_defaults_false() -> None:
    assert main_turn(builder())["verdicts"]["hedge_injected"] is False


def test_stub_turn_never_hedges_even_when_the_ethics_verdict_asks() -> None:
    event = builder().stub_turn(
        CTX,
        input_tokens=["x"],
        versor_condition=1.0,
        safety_verdict=SafetyVerdict(True),
        ethics_verdict=EthicsVerdict(False, ("honesty",), hedge_recommended=True),
    )
    assert event is not None
    assert event["verdicts"]["hedge_injected"] is False


def test_refusal_with_hedge_is_reported_and_not_published() -> None:
    sink = RecordingSink()
    breached: list[tuple[dict[str, Any], list[Breach]]] = []
    emitter = TurnAuditEmitter(sink, lambda e, b: breached.append((e, b)))
    # A runtime bug: it hedged a refusal. Refusal supersedes hedge.
    event = main_turn(
        builder(),
        surface_before_hedge="[refusal] no.",
        surface=inject_hedge("[refusal] no.", HEDGE),
        refusal_emitted=True,
    )
    with capture_logs() as logs:
        assert emitter.emit(event) is None
    assert sink.events == []
    assert [b.contract for b in breached[0][1]] == [Contract.REFUSAL_HEDGE_EXCLUSIVE]
    assert emitter.breached == 1
    assert emitter.emitted == 0
    assert logs[0]["event"] == "turn_event_contract_breach"
    assert logs[0]["log_level"] == "error"


def test_a_breaching_v4_turn_is_published_with_its_breaches_and_counted() -> None:
    sink = RecordingSink()
    registry = CollectorRegistry()
    recorded: list[list[Breach]] = []
    emitter = TurnAuditEmitter(
        sink,
        lambda e, b: pytest.fail("a v4 turn carries its breaches"),
        registry=registry,
        on_recorded=lambda e, b: recorded.append(b),
    )
    event = main_turn(
        builder(4),
        surface_before_hedge="[refusal] no.",
        surface=inject_hedge("[refusal] no.", HEDGE),
        refusal_emitted=True,
    )
    with capture_logs() as logs:
        assert emitter.emit(event) == "id-1"
    (published,) = sink.events
    assert published["breaches"] == ["refusal_hedge_exclusive"]
    assert event["breaches"] == []  # the runtime's own event is not changed
    assert published["verdicts"]["refusal_emitted"] is True
    assert [b.contract for b in recorded[0]] == [Contract.REFUSAL_HEDGE_EXCLUSIVE]
    assert (emitter.breached, emitter.emitted, emitter.dead_lettered) == (1, 1, 0)
    assert logs[0]["event"] == "turn_event_contract_breach"
    assert (
        registry.get_sample_value(
            "turnaudit_publisher_breaches_total",
            {"pack": event["pack_id"], "contract": "refusal_hedge_exclusive"},
        )
        == 1
    )


def test_the_breach_counter_bounds_its_pack_label() -> None:
    registry = CollectorRegistry()
    emitter = TurnAuditEmitter(RecordingSink(), registry=registry, max_packs=1)
    for pack in ("a", "b", "c"):
        event = main_turn(
            builder(4),
            surface_before_hedge="[refusal] no.",
            surface=inject_hedge("[refusal] no.", HEDGE),
            refusal_emitted=True,
        )
        event["pack_id"] = pack
        emitter.emit(event)
    labels = {"contract": "refusal_hedge_exclusive"}
    assert (
        registry.get_sample_value("turnaudit_publisher_breaches_total", {"pack": "a", **labels})
        == 1
    )
    assert (
        registry.get_sample_value("turnaudit_publisher_breaches_total", {"pack": "other", **labels})
        == 2
    )


def test_a_valid_turn_is_published() -> None:
    sink = RecordingSink()
    emitter = TurnAuditEmitter(sink, lambda e, b: pytest.fail(f"unexpected breach {b}"))
    assert emitter.emit(main_turn(builder())) == "id-1"
    assert emitter.emitted == 1


# -- action assessments --------------------------------------------------------


@pytest.mark.parametrize(
    ("assessment", "policy", "execution"),
    [
        (ActionAssessment.injection_detected_for("t"), "DOMAIN_VOID", "VOID"),
        (ActionAssessment.critic_unavailable_for("t"), "DOMAIN_HOLD", "HOLD"),
        (
            ActionAssessment.from_critic("t", Verdict.SEAL, RiskTier.CRITICAL, True),
            "DOMAIN_VOID",
            "SEAL",
        ),
        (
            ActionAssessment.from_critic("t", Verdict.SEAL, RiskTier.LOW, False),
            "DOMAIN_SEAL",
            "SEAL",
        ),
    ],
)
def test_action_assessment_is_recorded_with_its_derived_policy(
    assessment: ActionAssessment, policy: str, execution: str
) -> None:
    event = main_turn(builder(), action=assessment)
    recorded = event["action_assessment"]
    assert recorded["output_policy"] == policy
    assert recorded["execution_verdict"] == execution
    assert check_event(event) == []
