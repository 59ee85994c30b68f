"""The EVR-6 gate report's shape (``turn-audit/evr6-gate-report``), what a decision
authorizes, and how a failed requirement is written into the report."""

from __future__ import annotations

from fractions import Fraction
from typing import Literal, NotRequired, TypedDict

from turnaudit.evaluation.files import AuditorIdentityJson

REPORT_FORMAT = "turn-audit/evr6-gate-report"

Outcome = Literal["early", "late", "missed", "false_alarm", "clean"]
Decision = Literal["pass", "hold"]
Number = int | float | Fraction


# --- the report's shape ------------------------------------------------------------------


class TraceOutcomeReport(TypedDict):
    task_id: str
    task_family: str
    oracle_alarm_step: int | None
    first_alarm_step: int | None
    outcome: Outcome


class TallyReport(TypedDict):
    traces: int
    alarm_positive: int
    healthy: int
    true_positives: int
    false_negatives: int
    late_alarms: int
    missed_alarms: int
    false_alarms: int
    precision: float | None
    early_alarm_recall: float | None
    false_alarm_rate: float | None
    observations: int
    p95_latency_ms: float | None
    late_task_ids: list[str]


class FailedRequirement(TypedDict):
    requirement: str
    scope: str
    comparison: str
    threshold: int | float
    actual: int | float | None
    missed_by: int | float | None
    detail: str
    integrity_requirement: NotRequired[str]  # integrity failures: the seed's name for it
    cases: NotRequired[list[str]]  # integrity failures: every offending case


class Thresholds(TypedDict):
    min_traces: int
    min_alarm_positive: int
    min_healthy: int
    min_families: int
    min_traces_per_family: int
    min_precision: float
    min_early_alarm_recall: float
    max_false_alarm_rate: float
    max_p95_latency_ms: int
    p95_definition: str


class TierReport(TypedDict):
    tier: str  # "rules", "model", or "none" for observations of an untiered auditor
    decided: int
    p95_latency_ms: float | None


class TiersReport(TypedDict):
    pinned: list[str]  # the auditor's tiers in order, first tier first
    escalations: int  # observations decided past the first tier
    decided_by: list[TierReport]


class Authorization(TypedDict):
    pass_is: str
    pass_does_not: list[str]
    still_required: str
    hold_is: str
    evidence_artifact: str


class ExcludedTrace(TypedDict):
    task_id: str
    reason: str


class GateReport(TypedDict):
    format: str
    format_version: int
    decision: Decision
    auditor_id: AuditorIdentityJson | None
    thresholds: Thresholds
    overall: TallyReport
    families: dict[str, TallyReport]
    tiers: TiersReport
    traces: list[TraceOutcomeReport]
    excluded_traces: list[ExcludedTrace]
    failed_requirements: list[FailedRequirement]
    authorization: Authorization


# What a decision authorizes, in the terms of the evaluation's decision boundary.
_AUTHORIZATION: Authorization = {
    "pass_is": "an offline prerequisite for broader rollout of the per-turn auditor, and "
    "nothing more",
    "pass_does_not": [
        "enable per_turn_auditor",
        "change VICTOR_PER_TURN_AUDITOR (the runtime's per-turn auditor setting)",
        "authorize a default flip",
    ],
    "still_required": "a later flag-OFF/ON A/B on real agent runs, where task success with "
    "the per-turn auditor ON must match or beat task success with it OFF",
    "hold_is": "an expected experimental result, not permission to relax the pre-registered "
    "thresholds",
    "evidence_artifact": "keep this report, the source trace manifests, the auditor identity "
    "and the independent-label review together (turnaudit eval bundle) "
    "as the evidence for any rollout PR",
}


def authorization() -> Authorization:
    """What a pass does and does not authorize (a fresh copy for each report)."""
    return {**_AUTHORIZATION, "pass_does_not": list(_AUTHORIZATION["pass_does_not"])}


def _number(value: Number) -> int | float:
    return float(value) if isinstance(value, Fraction) else value


def failure(
    requirement: str,
    scope: str,
    *,
    comparison: str,
    threshold: Number,
    actual: Number | None,
    detail: str,
) -> FailedRequirement:
    missed_by: int | float | None = None
    if actual is not None:
        gap = abs(Fraction(threshold) - Fraction(actual))
        if gap.denominator == 1:
            missed_by = int(gap)
        else:
            # A measured latency carries float noise; microseconds are plenty.
            missed_by = round(float(gap), 6) if isinstance(actual, float) else float(gap)
    return {
        "requirement": requirement,
        "scope": scope,
        "comparison": comparison,
        "threshold": _number(threshold),
        "actual": None if actual is None else _number(actual),
        "missed_by": missed_by,
        "detail": detail,
    }


def at_least(
    requirement: str, scope: str, threshold: Number, actual: Number | None, detail: str
) -> list[FailedRequirement]:
    if actual is not None and Fraction(actual) >= Fraction(threshold):
        return []
    return [
        failure(
            requirement, scope, comparison=">=", threshold=threshold, actual=actual, detail=detail
        )
    ]


def at_most(
    requirement: str, scope: str, threshold: Number, actual: Number | None, detail: str
) -> list[FailedRequirement]:
    if actual is not None and Fraction(actual) <= Fraction(threshold):
        return []
    return [
        failure(
            requirement, scope, comparison="<=", threshold=threshold, actual=actual, detail=detail
        )
    ]
