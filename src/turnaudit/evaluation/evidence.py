"""Evidence producer: replay every prefix of every labelled trace through the pinned auditor.

Input is a label pack (never one carrying auditor output, so labels stay independent
of the auditor under test). Once the battery has pinned the auditor (both tiers of
the two-tier auditor), labels are refused, each case named, when an
``oracle_source`` is not a versioned ``NAME@VERSION`` source, names the auditor under
test, or a case carries its verdicts (``turnaudit.evaluation.independence``). Every
prefix ``steps[0..k]`` of every case is a fresh ``decide`` call, timed with
``time.perf_counter`` through the whole auditor, and recorded with the tier that
decided it. The evidence file is written only after ``end_battery`` confirms the
auditor is still the one pinned at the start; then the gate runs and its report is
written too.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from turnaudit.argparsing import run_standalone
from turnaudit.evaluation.auditor_options import add_auditor_arguments, build_auditor
from turnaudit.evaluation.auditors import PrefixAuditor, Step, decide_prefix
from turnaudit.evaluation.errors import AuditorIdentityError, UnversionedOracleError
from turnaudit.evaluation.files import (
    ORACLE_SOURCE_FORM,
    Case,
    EvidenceFile,
    LabelPack,
    Observation,
    oracle_source_problem,
    parse_labels,
    read_json,
    write_json,
)
from turnaudit.evaluation.gate import GateReport, evaluate, print_report
from turnaudit.evaluation.independence import CASE_LIMIT, refuse_dependent_labels


def observe_prefixes(
    steps: Sequence[Step], auditor: PrefixAuditor, clock: Callable[[], float] = time.perf_counter
) -> tuple[Observation, ...]:
    """One fresh auditor call per prefix ``steps[0..k]``, in order, with its latency
    (through the whole auditor, every tier it took) and the tier that decided."""
    observations = []
    for prefix_end in range(len(steps)):
        started = clock()
        decision = decide_prefix(auditor, steps[: prefix_end + 1])
        observations.append(
            Observation(prefix_end, decision.verdict, (clock() - started) * 1000.0, decision.tier)
        )
    return tuple(observations)


def refuse_unversioned_oracles(cases: Sequence[Mapping[str, object]]) -> None:
    """Raise ``UnversionedOracleError`` naming every case without a NAME@VERSION source."""
    by_source: dict[str, list[str]] = {}
    for i, case in enumerate(cases):
        oracle = case.get("oracle_source")
        if oracle_source_problem(oracle) is not None:
            by_source.setdefault(repr(oracle), []).append(str(case.get("task_id", f"cases[{i}]")))
    if by_source:
        named = [task_id for ids in by_source.values() for task_id in ids]
        listed = [f"{source} in {_ids(ids)}" for source, ids in by_source.items()]
        raise UnversionedOracleError(
            f"{len(named)} label(s) without a versioned oracle_source (write it as "
            f"{ORACLE_SOURCE_FORM}, e.g. reviewer-panel@2026-11): " + "; ".join(listed),
            sorted(named),
        )


def _ids(ids: Sequence[str]) -> str:
    more = len(ids) - CASE_LIMIT
    return ", ".join(ids[:CASE_LIMIT]) + (f" and {more} more" if more > 0 else "")


def replay(
    labels: LabelPack,
    auditor: PrefixAuditor,
    clock: Callable[[], float] = time.perf_counter,
    *,
    raw_cases: Sequence[Mapping[str, object]] | None = None,
) -> EvidenceFile:
    """Run the battery: one observation per prefix, in order, for every case.

    ``raw_cases``: the label pack's cases as read (keys the typed form drops are
    checked too); by default the typed cases.
    """
    cases_as_read: Sequence[Mapping[str, object]] = (
        raw_cases if raw_cases is not None else [case.to_json() for case in labels.cases]
    )
    refuse_unversioned_oracles(cases_as_read)
    auditor.begin_battery()
    pinned = auditor.identity
    # Only now is the auditor under test known (the model's digest is resolved here).
    refuse_dependent_labels(cases_as_read, pinned)
    cases = [
        Case(
            case.task_id,
            case.task_family,
            case.oracle_source,
            case.oracle_alarm_step,
            case.trace,
            observe_prefixes(case.trace.steps, auditor, clock),
        )
        for case in labels.cases
    ]
    auditor.end_battery()
    if auditor.identity != pinned:
        raise AuditorIdentityError(
            f"auditor identity changed during the battery: {pinned} before, "
            f"{auditor.identity} after"
        )
    return EvidenceFile(auditor_id=pinned, cases=tuple(cases))


def produce_evidence(
    labels: Path | Mapping[str, object],
    auditor: PrefixAuditor,
    *,
    evidence_output: Path,
    report_output: Path,
) -> GateReport:
    """Label pack (file or parsed JSON) in; evidence and gate report written; report returned."""
    raw = read_json(labels) if isinstance(labels, Path) else labels
    pack = parse_labels(raw)  # refuses a pack carrying auditor_id or observations
    cases = raw.get("cases") if isinstance(raw, Mapping) else None
    raw_cases = [c for c in cases if isinstance(c, Mapping)] if isinstance(cases, list) else None
    evidence = replay(pack, auditor, raw_cases=raw_cases)
    write_json(evidence_output, evidence.to_json())
    report = evaluate(evidence)
    write_json(report_output, report)
    return report


# The producer's command line: ``turnaudit eval evidence`` and
# ``python -m turnaudit.evaluation.evidence``.


def configure_evidence(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("labels", type=Path, help="label pack (no auditor output in it)")
    add_auditor_arguments(parser, default="ollama")
    parser.add_argument("--output", type=Path, required=True, help="evidence file to write")
    parser.add_argument("--report", type=Path, required=True, help="gate report to write")
    parser.set_defaults(handler=_evidence)


def _evidence(args: argparse.Namespace) -> int:
    report = produce_evidence(
        args.labels, build_auditor(args), evidence_output=args.output, report_output=args.report
    )
    print(f"evidence: {len(report['traces'])} case(s) -> {args.output}")
    return print_report(report, args.report)


if __name__ == "__main__":  # pragma: no cover - thin wrapper over the CLI's parser
    sys.exit(run_standalone("python -m turnaudit.evaluation.evidence", configure_evidence))
