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

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from turnaudit.argparsing import run_standalone
from turnaudit.evaluation.files import Case, EvidenceFile, load_evidence, write_json
from turnaudit.evaluation.gate_integrity import integrity_failures
from turnaudit.evaluation.gate_report import (
    REPORT_FORMAT,
    Decision,
    FailedRequirement,
    GateReport,
    Outcome,
    TallyReport,
    TiersReport,
    TraceOutcomeReport,
    at_least,
    at_most,
    authorization,
)

# GateReport is re-exported: callers take the report type from the gate.
__all__ = [
    "GateReport",
    "Tally",
    "TraceOutcome",
    "classify",
    "evaluate",
    "exit_code",
    "p95_nearest_rank",
    "run_gate",
]

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


@dataclass(frozen=True)
class TraceOutcome:
    """How the auditor did on one trace."""

    task_id: str
    task_family: str
    oracle_alarm_step: int | None
    first_alarm_step: int | None
    outcome: Outcome

    def to_json(self) -> TraceOutcomeReport:
        return {
            "task_id": self.task_id,
            "task_family": self.task_family,
            "oracle_alarm_step": self.oracle_alarm_step,
            "first_alarm_step": self.first_alarm_step,
            "outcome": self.outcome,
        }


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
    return TraceOutcome(
        case.task_id, case.task_family, case.oracle_alarm_step, first_alarm, outcome
    )


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
        "decided_by": [
            {
                "tier": tier,
                "decided": len(latencies.get(tier, [])),
                "p95_latency_ms": p95_nearest_rank(latencies.get(tier, [])),
            }
            for tier in order
        ],
    }


def _scope_failures(scope: str, tally: Tally) -> list[FailedRequirement]:
    """Recall and false-alarm rate apply overall and to every family."""
    early, positives = tally.count("early"), tally.alarm_positive
    false_alarms, healthy = tally.count("false_alarm"), tally.healthy
    return [
        *at_least(
            "early_alarm_recall",
            scope,
            MIN_EARLY_ALARM_RECALL,
            tally.early_alarm_recall,
            f"{early} of {positives} alarm-positive traces alarmed early "
            f"({tally.count('late')} late, {tally.count('missed')} missed)",
        ),
        *at_most(
            "false_alarm_rate",
            scope,
            MAX_FALSE_ALARM_RATE,
            tally.false_alarm_rate,
            f"{false_alarms} of {healthy} healthy traces raised an alarm",
        ),
    ]


def _family_failures(family: str, tally: Tally) -> list[FailedRequirement]:
    scope = f"family {family}"
    return [
        *at_least(
            "family_traces",
            scope,
            MIN_TRACES_PER_FAMILY,
            len(tally.outcomes),
            f"{len(tally.outcomes)} traces",
        ),
        *at_least(
            "family_alarm_positive",
            scope,
            1,
            tally.alarm_positive,
            "a family needs both polarities: alarm-positive traces",
        ),
        *at_least(
            "family_healthy",
            scope,
            1,
            tally.healthy,
            "a family needs both polarities: healthy traces",
        ),
        *_scope_failures(scope, tally),
    ]


def _tally(scored: Iterable[tuple[Case, TraceOutcome]]) -> Tally:
    chosen = list(scored)
    return Tally(
        outcomes=tuple(outcome for _, outcome in chosen),
        latencies=tuple(obs.latency_ms for case, _ in chosen for obs in case.observations or ()),
    )


def evaluate(evidence: EvidenceFile) -> GateReport:
    """Apply the pre-registered gate; the report is JSON-serialisable."""
    scored = [(case, classify(case)) for case in evidence.cases]
    overall = _tally(scored)
    family_names = sorted({case.task_family for case in evidence.cases})
    families = {
        name: _tally(pair for pair in scored if pair[0].task_family == name)
        for name in family_names
    }

    tp, fp = overall.count("early"), overall.count("false_alarm")
    p95 = p95_nearest_rank(overall.latencies)
    failed = [
        *integrity_failures(evidence),
        *at_least(
            "traces",
            "overall",
            MIN_TRACES,
            len(overall.outcomes),
            f"{len(overall.outcomes)} traces",
        ),
        *at_least(
            "alarm_positive_traces",
            "overall",
            MIN_ALARM_POSITIVE,
            overall.alarm_positive,
            f"{overall.alarm_positive} alarm-positive traces",
        ),
        *at_least(
            "healthy_traces",
            "overall",
            MIN_HEALTHY,
            overall.healthy,
            f"{overall.healthy} healthy traces",
        ),
        *at_least(
            "families",
            "overall",
            MIN_FAMILIES,
            len(families),
            f"{len(families)} families: {', '.join(family_names) or 'none'}",
        ),
        *at_least(
            "precision",
            "overall",
            MIN_PRECISION,
            overall.precision,
            f"{tp} early alarms, {fp} false alarms on healthy traces"
            + ("" if tp + fp else " (undefined: no alarm counted)"),
        ),
        *_scope_failures("overall", overall),
        *at_most(
            "p95_latency_ms",
            "overall",
            MAX_P95_LATENCY_MS,
            p95,
            f"nearest-rank p95 over {len(overall.latencies)} observations",
        ),
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
        "excluded_traces": [
            {"task_id": e.task_id, "reason": e.reason} for e in evidence.exclusions
        ],
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


# The gate's command line: ``turnaudit eval gate`` and ``python -m turnaudit.evaluation.gate``.


def configure_gate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("evidence", type=Path, help="evidence file")
    parser.add_argument("--output", type=Path, required=True, help="gate report to write")
    parser.set_defaults(handler=_gate)


def _gate(args: argparse.Namespace) -> int:
    return print_report(run_gate(args.evidence, args.output), args.output)


def print_report(report: GateReport, path: Path) -> int:
    """The gate's decision and every failed requirement, one line each; the exit code."""
    failed = report["failed_requirements"]
    print(f"EVR-6 gate: {report['decision']} ({len(failed)} requirement(s) failed) -> {path}")
    for failure in failed:
        print(
            f"  {failure['requirement']} [{failure['scope']}]: {failure['actual']} "
            f"vs {failure['comparison']} {failure['threshold']} "
            f"(missed by {failure['missed_by']}): {failure['detail']}"
        )
    tiers = report["tiers"]
    if len(tiers["pinned"]) > 1:
        decided = ", ".join(f"{t['tier']} {t['decided']}" for t in tiers["decided_by"])
        print(f"  tiers: {decided} observation(s) decided; {tiers['escalations']} escalated")
    scope = report["authorization"]
    print(
        f"  a pass is {scope['pass_is']}: it does not {'; '.join(scope['pass_does_not'])}; "
        f"still required: {scope['still_required']}"
    )
    return exit_code(report)


if __name__ == "__main__":  # pragma: no cover - thin wrapper over the CLI's parser
    sys.exit(run_standalone("python -m turnaudit.evaluation.gate", configure_gate))
