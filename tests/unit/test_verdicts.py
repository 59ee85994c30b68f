"""The verdict split: every row of the return-path table and the output-policy rule."""

from __future__ import annotations

import dataclasses

import pytest

from turnaudit.verdicts import (
    ActionAssessment,
    OutputPolicy,
    RiskTier,
    Verdict,
    derive_output_policy,
)


def test_injection_detected_is_void_void_and_domain_void() -> None:
    a = ActionAssessment.injection_detected_for("delete logs")
    assert (a.execution_verdict, a.action_risk_verdict) == (Verdict.VOID, Verdict.VOID)
    assert a.output_policy is OutputPolicy.DOMAIN_VOID
    assert a.injection_detected
    assert not a.approved


def test_critic_unavailable_is_hold_hold_and_domain_hold() -> None:
    a = ActionAssessment.critic_unavailable_for("delete logs")
    assert (a.execution_verdict, a.action_risk_verdict) == (Verdict.HOLD, Verdict.HOLD)
    assert a.output_policy is OutputPolicy.DOMAIN_HOLD
    assert not a.critic_available
    assert not a.approved


def test_critic_success_executes_seal_and_takes_risk_from_the_critic() -> None:
    a = ActionAssessment.from_critic("open file", Verdict.SEAL, RiskTier.LOW, False)
    assert a.execution_verdict is Verdict.SEAL
    assert a.output_policy is OutputPolicy.DOMAIN_SEAL
    assert a.approved


def test_the_seed_example_is_not_approved_although_the_critique_ran() -> None:
    # "Delete all container logs permanently": the critique ran (SEAL) but the
    # action is CRITICAL and needs a human; the old code said DOMAIN_SEAL.
    a = ActionAssessment.from_critic(
        "Delete all container logs permanently without backup or human approval",
        Verdict.SEAL,
        RiskTier.CRITICAL,
        True,
    )
    assert a.execution_verdict is Verdict.SEAL
    assert a.output_policy is OutputPolicy.DOMAIN_VOID
    assert not a.approved


@pytest.mark.parametrize(
    ("tier", "action", "human", "expected"),
    [
        (RiskTier.RED, Verdict.SEAL, False, OutputPolicy.DOMAIN_VOID),
        (RiskTier.CRITICAL, Verdict.SEAL, False, OutputPolicy.DOMAIN_VOID),
        (RiskTier.LOW, Verdict.VOID, False, OutputPolicy.DOMAIN_VOID),
        (RiskTier.RED, Verdict.HOLD, True, OutputPolicy.DOMAIN_VOID),  # VOID wins over HOLD
        (RiskTier.LOW, Verdict.SEAL, True, OutputPolicy.DOMAIN_HOLD),
        (RiskTier.MEDIUM, Verdict.HOLD, False, OutputPolicy.DOMAIN_HOLD),
        (RiskTier.HIGH, Verdict.SEAL, False, OutputPolicy.DOMAIN_SEAL),
        (RiskTier.UNKNOWN, Verdict.SEAL, False, OutputPolicy.DOMAIN_SEAL),
    ],
)
def test_output_policy_rule(
    tier: RiskTier, action: Verdict, human: bool, expected: OutputPolicy
) -> None:
    assert derive_output_policy(tier, action, human) is expected
    assessed = ActionAssessment.from_critic("x", action, tier, human)
    assert assessed.output_policy is expected


def test_output_policy_cannot_be_set_by_hand() -> None:
    with pytest.raises(TypeError):
        ActionAssessment(
            "x",
            Verdict.SEAL,
            Verdict.SEAL,
            RiskTier.CRITICAL,
            False,
            output_policy=OutputPolicy.DOMAIN_SEAL,
        )  # type: ignore[call-arg]  # a refused keyword on purpose
    a = ActionAssessment.from_critic("x", Verdict.SEAL, RiskTier.LOW, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.output_policy = OutputPolicy.DOMAIN_VOID  # type: ignore[misc]  # frozen: the assignment must fail


def test_approval_never_reads_the_execution_verdict() -> None:
    # Same action risk, different execution verdicts: same approval.
    ran = ActionAssessment("x", Verdict.SEAL, Verdict.HOLD, RiskTier.LOW, False)
    failed = ActionAssessment("x", Verdict.VOID, Verdict.HOLD, RiskTier.LOW, False)
    assert ran.output_policy is failed.output_policy is OutputPolicy.DOMAIN_HOLD
    assert ran.approved is failed.approved is False


def test_an_assessment_cannot_contradict_its_return_path() -> None:
    with pytest.raises(ValueError, match="not VOID/VOID"):
        ActionAssessment(
            "x", Verdict.SEAL, Verdict.VOID, RiskTier.LOW, False, injection_detected=True
        )
    with pytest.raises(ValueError, match="not HOLD/HOLD"):
        ActionAssessment(
            "x", Verdict.SEAL, Verdict.SEAL, RiskTier.LOW, False, critic_available=False
        )
