"""The verdict types of a turn (ADR-0035..0039) and the verdict-split rule.

These are what a runtime hands to the adapter. They are frozen, slotted
dataclasses like ADR-0039's ``TurnVerdicts``; ``to_avro`` gives the record the
Avro schemas describe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from turnaudit import events as avro

# The surface a stub turn records when no refusal fired (ADR-0039's table).
UNKNOWN_DOMAIN_SURFACE = "[unknown-domain]"


class Verdict(enum.StrEnum):
    SEAL = "SEAL"
    HOLD = "HOLD"
    VOID = "VOID"


class RiskTier(enum.StrEnum):
    UNKNOWN = "UNKNOWN"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"
    RED = "RED"
    CRITICAL = "CRITICAL"


class OutputPolicy(enum.StrEnum):
    DOMAIN_SEAL = "DOMAIN_SEAL"
    DOMAIN_HOLD = "DOMAIN_HOLD"
    DOMAIN_VOID = "DOMAIN_VOID"


class TurnPath(enum.StrEnum):
    MAIN = "MAIN"
    STUB = "STUB"


def derive_output_policy(
    risk_tier: str, action_risk_verdict: str, human_decision_required: bool
) -> OutputPolicy:
    """The verdict-split rule: computed from the action's risk, never from execution."""
    if risk_tier in (RiskTier.RED, RiskTier.CRITICAL) or action_risk_verdict == Verdict.VOID:
        return OutputPolicy.DOMAIN_VOID
    if human_decision_required or action_risk_verdict == Verdict.HOLD:
        return OutputPolicy.DOMAIN_HOLD
    return OutputPolicy.DOMAIN_SEAL


def verdict_split_problem(
    execution: str, action_risk: str, injection_detected: bool, critic_available: bool
) -> str | None:
    """The verdict split's fixed return paths: injection -> VOID/VOID, critic
    unavailable -> HOLD/HOLD. None when the pair fits the path it claims."""
    if injection_detected and (execution, action_risk) != (Verdict.VOID, Verdict.VOID):
        return f"injection detected but verdicts are {execution}/{action_risk}, not VOID/VOID"
    if not critic_available and (execution, action_risk) != (Verdict.HOLD, Verdict.HOLD):
        return f"critic unavailable but verdicts are {execution}/{action_risk}, not HOLD/HOLD"
    return None


@dataclass(frozen=True, slots=True)
class IdentityScore:
    score: float
    threshold: float = 0.5

    def to_avro(self) -> avro.IdentityScore:
        return {"score": self.score, "threshold": self.threshold}


@dataclass(frozen=True, slots=True)
class SafetyVerdict:
    passed: bool
    violated_boundary_ids: tuple[str, ...] = ()

    def to_avro(self) -> avro.SafetyVerdict:
        return {"passed": self.passed, "violated_boundary_ids": list(self.violated_boundary_ids)}


@dataclass(frozen=True, slots=True)
class EthicsVerdict:
    passed: bool
    violated_predicate_ids: tuple[str, ...] = ()
    hedge_recommended: bool = False

    def to_avro(self) -> avro.EthicsVerdict:
        return {
            "passed": self.passed,
            "violated_predicate_ids": list(self.violated_predicate_ids),
            "hedge_recommended": self.hedge_recommended,
        }


@dataclass(frozen=True, slots=True)
class TurnVerdicts:
    """ADR-0039's bundle: one field, the full picture of a turn's verdicts."""

    identity_score: IdentityScore | None
    safety_verdict: SafetyVerdict | None
    ethics_verdict: EthicsVerdict | None
    refusal_emitted: bool
    hedge_injected: bool

    def to_avro(self, schema_version: int) -> avro.TurnVerdicts:
        return {
            "schema_version": schema_version,
            "identity_score": None
            if self.identity_score is None
            else self.identity_score.to_avro(),
            "safety_verdict": None
            if self.safety_verdict is None
            else self.safety_verdict.to_avro(),
            "ethics_verdict": None
            if self.ethics_verdict is None
            else self.ethics_verdict.to_avro(),
            "refusal_emitted": self.refusal_emitted,
            "hedge_injected": self.hedge_injected,
        }


@dataclass(frozen=True, slots=True)
class ActionAssessment:
    """The verdict split: whether the critique ran vs. whether the action is safe.

    Build one with the constructors below; each return path of the critic
    sets both verdicts and derives ``output_policy``.
    """

    target: str
    execution_verdict: Verdict
    action_risk_verdict: Verdict
    risk_tier: RiskTier
    human_decision_required: bool
    injection_detected: bool = False
    critic_available: bool = True
    output_policy: OutputPolicy = field(init=False)

    def __post_init__(self) -> None:
        problem = verdict_split_problem(
            self.execution_verdict,
            self.action_risk_verdict,
            self.injection_detected,
            self.critic_available,
        )
        if problem:
            raise ValueError(problem)
        object.__setattr__(
            self,
            "output_policy",
            derive_output_policy(
                self.risk_tier, self.action_risk_verdict, self.human_decision_required
            ),
        )

    @property
    def approved(self) -> bool:
        """Approval reads action risk, tier and policy; never the execution verdict."""
        return self.output_policy is OutputPolicy.DOMAIN_SEAL

    @classmethod
    def injection_detected_for(
        cls, target: str, risk_tier: RiskTier = RiskTier.UNKNOWN
    ) -> ActionAssessment:
        """Prompt injection in the target: the critique is void and so is the action."""
        return cls(target, Verdict.VOID, Verdict.VOID, risk_tier, False, injection_detected=True)

    @classmethod
    def critic_unavailable_for(cls, target: str) -> ActionAssessment:
        """The critic module could not run: hold both, a human decides."""
        return cls(
            target, Verdict.HOLD, Verdict.HOLD, RiskTier.UNKNOWN, True, critic_available=False
        )

    @classmethod
    def from_critic(
        cls,
        target: str,
        action_risk_verdict: Verdict,
        risk_tier: RiskTier,
        human_decision_required: bool,
    ) -> ActionAssessment:
        """The critique ran (execution SEAL); the action's risk comes from the critic."""
        return cls(target, Verdict.SEAL, action_risk_verdict, risk_tier, human_decision_required)

    def to_avro(self) -> avro.ActionAssessment:
        return {
            "target": self.target,
            "execution_verdict": self.execution_verdict.value,
            "action_risk_verdict": self.action_risk_verdict.value,
            "risk_tier": self.risk_tier.value,
            "human_decision_required": self.human_decision_required,
            "output_policy": self.output_policy.value,
            "injection_detected": self.injection_detected,
            "critic_available": self.critic_available,
        }
