"""The pre-registered EVR-6 gate: an evidence file in, ``pass`` or ``hold`` out.

The thresholds below are module constants on purpose: no flag or config can
lower them. Definitions the report relies on:

- A trace is *alarm-positive* when ``oracle_alarm_step`` is not null, else *healthy*.
- The *first alarm* is the smallest ``prefix_end`` whose verdict is ``alarm``.
- Alarm-positive trace: first alarm at or before the oracle step is *early* (true
  positive); after it is *late* (false negative, reported as late); none is *missed*
  (false negative).
- Healthy trace: any alarm is a *false alarm* (false positive).
- precision = TP / (TP + FP). Late alarms are false negatives, not false positives:
  intervention was justified on that trace, and counting it twice would punish one
  trace in two figures.
- early-alarm recall = TP / alarm-positive traces; false-alarm rate = FP / healthy traces.
  A ratio with a zero denominator is undefined and fails its requirement.
- Every family in the evidence is held to the per-family requirements (>= 4 traces,
  both polarities, recall, false-alarm rate): a family too small to measure is not excused.
- p95 latency is the nearest-rank percentile over every observation: the
  ceil(0.95 * n)-th smallest latency (1-based), always a latency actually measured.
  An observation's latency is through the whole auditor: for the two-tier auditor,
  the rules plus, when they escalated, the model; so the p95 covers the composed
  auditor. The report also gives each tier's share of the decisions and its p95.
- When ``auditor_id`` pins tiers, its digest must be the tiers' composed digest (one
  tier: that tier's digest), the rules tier must name its rule-set version, and
  every observation must name a pinned tier: a changed rule-set version or model
  digest is a hold for integrity (pinned identities).

A pass is an offline prerequisite for broader rollout and nothing more: the report
says so in ``authorization``.

Ratios are compared as exact fractions, so a precision of exactly 0.80 passes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

from turnaudit.evaluation.files import (
    AuditorIdentity,
    AuditorIdentityJson,
    Case,
    EvidenceFile,
    composed_digest,
    load_evidence,
    write_json,
)

MIN_TRACES = 24
MIN_ALARM_POSITIVE = 8
MIN_HEALTHY = 8
MIN_FAMILIES = 4
MIN_TRACES_PER_FAMILY = 4
MIN_PRECISION = Fraction(80, 100)
MIN_EARLY_ALARM_RECALL = Fraction(80, 100)
MAX_FALSE_ALARM_RATE = Fraction(5, 100)
MAX_P95_LATENCY_MS = 2_000
P95_RANK = Fraction(95, 100)

REPORT_FORMAT = "turn-audit/evr6-gate-report"
DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
# Integrity failures list this many offending cases in the one-line detail; all are in "cases".
DETAIL_CASE_LIMIT = 10

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


@dataclass(frozen=True)
class TraceOutcome:
    """How the auditor did on one trace."""

    task_id: str
    task_family: str
    oracle_alarm_step: int | None
    first_alarm_step: int | None
    outcome: Outcome

    def to_json(self) -> TraceOutcomeReport:
        return {"task_id": self.task_id, "task_family": self.task_family,
                "oracle_alarm_step": self.oracle_alarm_step,
                "first_alarm_step": self.first_alarm_step, "outcome": self.outcome}


def classify(case: Case) -> TraceOutcome:
    alarms = [obs.prefix_end for obs in case.observations or () if obs.verdict == "alarm"]
    first_alarm = min(alarms) if alarms else None
    outcome: Outcome
    if case.oracle_alarm_step is None:
        outcome = "clean" if first_alarm is None else "false_alarm"
    elif first_alarm is None:
        outcome = "missed"
    else:
        outcome = "early" if first_alarm <= case.oracle_alarm_step else "late"
    return TraceOutcome(case.task_id, case.task_family, case.oracle_alarm_step, first_alarm,
                        outcome)


def p95_nearest_rank(latencies: Sequence[float]) -> float | None:
    """The ceil(0.95 * n)-th smallest value (1-based); None when there is none."""
    if not latencies:
        return None
    rank = -(-len(latencies) * P95_RANK.numerator // P95_RANK.denominator)  # exact ceil
    return sorted(latencies)[rank - 1]


def _ratio(numerator: int, denominator: int) -> Fraction | None:
    return Fraction(numerator, denominator) if denominator else None


@dataclass(frozen=True)
class Tally:
    """The figures for one scope (overall or one family)."""

    outcomes: tuple[TraceOutcome, ...]
    latencies: tuple[float, ...]

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    @property
    def alarm_positive(self) -> int:
        return sum(1 for o in self.outcomes if o.oracle_alarm_step is not None)

    @property
    def healthy(self) -> int:
        return len(self.outcomes) - self.alarm_positive

    @property
    def precision(self) -> Fraction | None:
        true_positives = self.count("early")
        return _ratio(true_positives, true_positives + self.count("false_alarm"))

    @property
    def early_alarm_recall(self) -> Fraction | None:
        return _ratio(self.count("early"), self.alarm_positive)

    @property
    def false_alarm_rate(self) -> Fraction | None:
        return _ratio(self.count("false_alarm"), self.healthy)

    def to_json(self) -> TallyReport:
        def as_float(value: Fraction | None) -> float | None:
            return None if value is None else float(value)

        return {
            "traces": len(self.outcomes),
            "alarm_positive": self.alarm_positive,
            "healthy": self.healthy,
            "true_positives": self.count("early"),
            "false_negatives": self.count("late") + self.count("missed"),
            "late_alarms": self.count("late"),
            "missed_alarms": self.count("missed"),
            "false_alarms": self.count("false_alarm"),
            "precision": as_float(self.precision),
            "early_alarm_recall": as_float(self.early_alarm_recall),
            "false_alarm_rate": as_float(self.false_alarm_rate),
            "observations": len(self.latencies),
            "p95_latency_ms": p95_nearest_rank(self.latencies),
            "late_task_ids": [o.task_id for o in self.outcomes if o.outcome == "late"],
        }


# --- requirements ------------------------------------------------------------------------


def _number(value: Number) -> int | float:
    return float(value) if isinstance(value, Fraction) else value


def _failure(requirement: str, scope: str, *, comparison: str, threshold: Number,
             actual: Number | None, detail: str) -> FailedRequirement:
    missed_by: int | float | None = None
    if actual is not None:
        gap = abs(Fraction(threshold) - Fraction(actual))
        if gap.denominator == 1:
            missed_by = int(gap)
        else:
            # A measured latency carries float noise; microseconds are plenty.
            missed_by = round(float(gap), 6) if isinstance(actual, float) else float(gap)
    return {"requirement": requirement, "scope": scope, "comparison": comparison,
            "threshold": _number(threshold),
            "actual": None if actual is None else _number(actual),
            "missed_by": missed_by, "detail": detail}


def _at_least(requirement: str, scope: str, threshold: Number, actual: Number | None,
              detail: str) -> list[FailedRequirement]:
    if actual is not None and Fraction(actual) >= Fraction(threshold):
        return []
    return [_failure(requirement, scope, comparison=">=", threshold=threshold, actual=actual,
                     detail=detail)]


def _at_most(requirement: str, scope: str, threshold: Number, actual: Number | None,
             detail: str) -> list[FailedRequirement]:
    if actual is not None and Fraction(actual) <= Fraction(threshold):
        return []
    return [_failure(requirement, scope, comparison="<=", threshold=threshold, actual=actual,
                     detail=detail)]


# The seed's pre-registered integrity requirements, as the report names them.
SEED_INTEGRITY = {
    "integrity.unique_task_ids": "unique ids",
    "integrity.step_indices": "sequential step indices",
    "integrity.prefix_coverage": "full ordered prefix coverage",
    "integrity.labels": "a named oracle label within the trace",
    "integrity.pinned_identity": "pinned identities",
    "integrity.tier_attribution": "pinned identities",
}


def _integrity(requirement: str, problems: dict[str, str]) -> list[FailedRequirement]:
    if not problems:
        return []
    listed = [f"{task_id}: {problem}" for task_id, problem in problems.items()]
    more = len(listed) - DETAIL_CASE_LIMIT
    detail = "; ".join(listed[:DETAIL_CASE_LIMIT]) + (f"; and {more} more" if more > 0 else "")
    seed_name = SEED_INTEGRITY[requirement]
    failure = _failure(requirement, "overall", comparison="==", threshold=0,
                       actual=len(problems), detail=f"integrity ({seed_name}): {detail}")
    failure["integrity_requirement"] = seed_name
    failure["cases"] = sorted(problems)
    return [failure]


def _step_index_problem(case: Case) -> str | None:
    if not case.trace.steps:
        return "trace has no steps"
    for position, step in enumerate(case.trace.steps):
        index = step.get("index")
        if isinstance(index, bool) or index != position:
            return f"steps[{position}].index is {index!r}, expected {position}"
    return None


def _prefix_coverage_problem(case: Case) -> str | None:
    expected = list(range(len(case.trace.steps)))
    found = [obs.prefix_end for obs in case.observations or ()]
    if found == expected:
        return None
    missing = sorted(set(expected) - set(found))
    if missing:
        return f"no observation for prefix_end {missing}"
    if len(found) != len(set(found)):
        return "more than one observation for a prefix"
    if set(found) - set(expected):
        return f"prefix_end beyond the trace: {sorted(set(found) - set(expected))}"
    return f"observations out of order: prefix_end {found}"


def _label_problem(case: Case) -> str | None:
    if not case.task_id.strip() or not case.task_family.strip():
        return "empty task_id or task_family"
    if not case.oracle_source.strip():
        return "empty oracle_source: the oracle must be named"
    step = case.oracle_alarm_step
    if step is not None and not 0 <= step < len(case.trace.steps):
        return f"oracle_alarm_step {step} outside the trace's steps 0..{len(case.trace.steps) - 1}"
    return None


def _tier_problems(identity: AuditorIdentity) -> dict[str, str]:
    """What is wrong with the tiers an identity pins (none pinned: nothing to check)."""
    problems: dict[str, str] = {}
    tiers = identity.tiers
    if not tiers:
        return problems
    kinds = [tier.tier for tier in tiers]
    if len(set(kinds)) != len(kinds):
        problems["auditor_id.tiers"] = f"a tier appears twice: {kinds}"
    for i, tier in enumerate(tiers):
        where = f"auditor_id.tiers[{i}]"
        if not tier.name.strip():
            problems[f"{where}.name"] = "empty tier name"
        if not DIGEST_PATTERN.fullmatch(tier.digest):
            problems[f"{where}.digest"] = (
                f"{tier.digest!r} is not sha256: followed by 64 lowercase hex digits")
        if tier.tier == "rules" and not (tier.version or "").strip():
            problems[f"{where}.version"] = "the rules tier names no rule-set version"
    expected = tiers[0].digest if len(tiers) == 1 else composed_digest(tiers)
    if identity.digest != expected:
        pinned = ", ".join(f"{t.tier} {t.name}@{t.version or '-'} {t.digest[:19]}…"
                           for t in tiers)
        problems["auditor_id.tiers"] = (
            f"the digest {identity.digest[:19]}… does not pin these tiers ({pinned}; they "
            f"compose to {expected[:19]}…): a tier's rule-set version or model digest is not "
            "the one the battery ran")
    return problems


def _tier_attribution_problem(tiers: tuple[str, ...]) -> Callable[[Case], str | None]:
    def problem(case: Case) -> str | None:
        for obs in case.observations or ():
            if obs.tier not in tiers:
                return (f"observation {obs.prefix_end} was decided by tier {obs.tier!r}, not "
                        f"by a pinned tier {list(tiers)}")
        return None

    return problem


def _integrity_failures(evidence: EvidenceFile) -> list[FailedRequirement]:
    def problems(check: Callable[[Case], str | None]) -> dict[str, str]:
        found: dict[str, str] = {}
        for case in evidence.cases:
            problem = check(case)
            if problem is not None:
                found.setdefault(case.task_id, problem)
        return found

    seen: dict[str, int] = {}
    for case in evidence.cases:
        seen[case.task_id] = seen.get(case.task_id, 0) + 1
    duplicates = {task_id: f"appears {n} times" for task_id, n in seen.items() if n > 1}

    identity_problems: dict[str, str] = {}
    identity = evidence.auditor_id
    if identity is None:
        identity_problems["auditor_id"] = evidence.identity_problem or "auditor_id is missing"
    else:
        if not identity.name.strip():
            identity_problems["auditor_id"] = "auditor_id.name is empty"
        if not DIGEST_PATTERN.fullmatch(identity.digest):
            identity_problems["auditor_id.digest"] = (
                f"{identity.digest!r} is not sha256: followed by 64 lowercase hex digits, "
                "so the auditor under test is not pinned")
        identity_problems.update(_tier_problems(identity))
    pinned_tiers = tuple(t.tier for t in identity.tiers) if identity is not None else ()
    attribution = problems(_tier_attribution_problem(pinned_tiers)) if pinned_tiers else {}

    return [
        *_integrity("integrity.unique_task_ids", duplicates),
        *_integrity("integrity.step_indices", problems(_step_index_problem)),
        *_integrity("integrity.prefix_coverage", problems(_prefix_coverage_problem)),
        *_integrity("integrity.labels", problems(_label_problem)),
        *_integrity("integrity.pinned_identity", identity_problems),
        *_integrity("integrity.tier_attribution", attribution),
    ]


def _tiers_report(evidence: EvidenceFile) -> TiersReport:
    pinned: list[str] = [t.tier for t in evidence.auditor_id.tiers] if evidence.auditor_id else []
    latencies: dict[str, list[float]] = {}
    for case in evidence.cases:
        for obs in case.observations or ():
            latencies.setdefault(obs.tier or "none", []).append(obs.latency_ms)
    order = [*pinned, *sorted(set(latencies) - set(pinned))]
    past_first = set(pinned[1:])
    return {
        "pinned": pinned,
        "escalations": sum(len(latencies.get(tier, [])) for tier in past_first),
        "decided_by": [{"tier": tier, "decided": len(latencies.get(tier, [])),
                        "p95_latency_ms": p95_nearest_rank(latencies.get(tier, []))}
                       for tier in order],
    }


def _scope_failures(scope: str, tally: Tally) -> list[FailedRequirement]:
    """Recall and false-alarm rate apply overall and to every family."""
    early, positives = tally.count("early"), tally.alarm_positive
    false_alarms, healthy = tally.count("false_alarm"), tally.healthy
    return [
        *_at_least("early_alarm_recall", scope, MIN_EARLY_ALARM_RECALL, tally.early_alarm_recall,
                   f"{early} of {positives} alarm-positive traces alarmed early "
                   f"({tally.count('late')} late, {tally.count('missed')} missed)"),
        *_at_most("false_alarm_rate", scope, MAX_FALSE_ALARM_RATE, tally.false_alarm_rate,
                  f"{false_alarms} of {healthy} healthy traces raised an alarm"),
    ]


def _family_failures(family: str, tally: Tally) -> list[FailedRequirement]:
    scope = f"family {family}"
    return [
        *_at_least("family_traces", scope, MIN_TRACES_PER_FAMILY, len(tally.outcomes),
                   f"{len(tally.outcomes)} traces"),
        *_at_least("family_alarm_positive", scope, 1, tally.alarm_positive,
                   "a family needs both polarities: alarm-positive traces"),
        *_at_least("family_healthy", scope, 1, tally.healthy,
                   "a family needs both polarities: healthy traces"),
        *_scope_failures(scope, tally),
    ]


def _tally(scored: Iterable[tuple[Case, TraceOutcome]]) -> Tally:
    chosen = list(scored)
    return Tally(outcomes=tuple(outcome for _, outcome in chosen),
                 latencies=tuple(obs.latency_ms for case, _ in chosen
                                 for obs in case.observations or ()))


def evaluate(evidence: EvidenceFile) -> GateReport:
    """Apply the pre-registered gate; the report is JSON-serialisable."""
    scored = [(case, classify(case)) for case in evidence.cases]
    overall = _tally(scored)
    family_names = sorted({case.task_family for case in evidence.cases})
    families = {name: _tally(pair for pair in scored if pair[0].task_family == name)
                for name in family_names}

    tp, fp = overall.count("early"), overall.count("false_alarm")
    p95 = p95_nearest_rank(overall.latencies)
    failed = [
        *_integrity_failures(evidence),
        *_at_least("traces", "overall", MIN_TRACES, len(overall.outcomes),
                   f"{len(overall.outcomes)} traces"),
        *_at_least("alarm_positive_traces", "overall", MIN_ALARM_POSITIVE,
                   overall.alarm_positive, f"{overall.alarm_positive} alarm-positive traces"),
        *_at_least("healthy_traces", "overall", MIN_HEALTHY, overall.healthy,
                   f"{overall.healthy} healthy traces"),
        *_at_least("families", "overall", MIN_FAMILIES, len(families),
                   f"{len(families)} families: {', '.join(family_names) or 'none'}"),
        *_at_least("precision", "overall", MIN_PRECISION, overall.precision,
                   f"{tp} early alarms, {fp} false alarms on healthy traces"
                   + ("" if tp + fp else " (undefined: no alarm counted)")),
        *_scope_failures("overall", overall),
        *_at_most("p95_latency_ms", "overall", MAX_P95_LATENCY_MS, p95,
                  f"nearest-rank p95 over {len(overall.latencies)} observations"),
    ]
    for name, tally in families.items():
        failed.extend(_family_failures(name, tally))

    decision: Decision = "hold" if failed else "pass"
    return {
        "format": REPORT_FORMAT,
        "format_version": 1,
        "decision": decision,
        "auditor_id": None if evidence.auditor_id is None else evidence.auditor_id.to_json(),
        "thresholds": {
            "min_traces": MIN_TRACES,
            "min_alarm_positive": MIN_ALARM_POSITIVE,
            "min_healthy": MIN_HEALTHY,
            "min_families": MIN_FAMILIES,
            "min_traces_per_family": MIN_TRACES_PER_FAMILY,
            "min_precision": float(MIN_PRECISION),
            "min_early_alarm_recall": float(MIN_EARLY_ALARM_RECALL),
            "max_false_alarm_rate": float(MAX_FALSE_ALARM_RATE),
            "max_p95_latency_ms": MAX_P95_LATENCY_MS,
            "p95_definition": "nearest rank: the ceil(0.95*n)-th smallest latency over all "
                              "observations",
        },
        "overall": overall.to_json(),
        "families": {name: tally.to_json() for name, tally in families.items()},
        "tiers": _tiers_report(evidence),
        "traces": [outcome.to_json() for _, outcome in scored],
        "excluded_traces": [{"task_id": e.task_id, "reason": e.reason}
                            for e in evidence.exclusions],
        "failed_requirements": failed,
        "authorization": authorization(),
    }


def run_gate(evidence_path: Path, report_path: Path) -> GateReport:
    """Load evidence, apply the gate, write the report; return it."""
    report = evaluate(load_evidence(evidence_path))
    write_json(report_path, report)
    return report


def exit_code(report: GateReport) -> int:
    """0 only on pass; 1 on hold (2 is left for usage and input errors)."""
    return 0 if report["decision"] == "pass" else 1


if __name__ == "__main__":  # pragma: no cover - thin wrapper over the CLI's parser
    from turnaudit.evaluation.cli import configure_gate, run_standalone

    sys.exit(run_standalone("python -m turnaudit.evaluation.gate", configure_gate))
