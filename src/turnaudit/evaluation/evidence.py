"""Evidence producer: replay every prefix of every labelled trace through the pinned auditor.

Input is a label pack (never one carrying auditor output, so labels stay independent
of the auditor under test). Every prefix ``steps[0..k]`` of every case is a fresh
``assess`` call, timed with ``time.perf_counter``. The evidence file is written only
after ``end_battery`` confirms the auditor is still the one pinned at the start;
then the gate runs and its report is written too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from turnaudit.evaluation.auditors import PrefixAuditor
from turnaudit.evaluation.errors import AuditorIdentityError
from turnaudit.evaluation.files import (
    Case,
    EvidenceFile,
    LabelPack,
    Observation,
    parse_labels,
    read_json,
    write_json,
)
from turnaudit.evaluation.gate import evaluate


def observe_prefixes(steps: Sequence[Mapping[str, Any]], auditor: PrefixAuditor,
                     clock: Callable[[], float] = time.perf_counter) -> tuple[Observation, ...]:
    """One fresh auditor call per prefix ``steps[0..k]``, in order, with its latency."""
    observations = []
    for prefix_end in range(len(steps)):
        started = clock()
        verdict = auditor.assess(steps[: prefix_end + 1])
        observations.append(Observation(prefix_end, verdict, (clock() - started) * 1000.0))
    return tuple(observations)


def replay(labels: LabelPack, auditor: PrefixAuditor,
           clock: Callable[[], float] = time.perf_counter) -> EvidenceFile:
    """Run the battery: one observation per prefix, in order, for every case."""
    auditor.begin_battery()
    pinned = auditor.identity
    cases = [
        Case(case.task_id, case.task_family, case.oracle_source, case.oracle_alarm_step,
             case.trace, observe_prefixes(case.trace.steps, auditor, clock))
        for case in labels.cases
    ]
    auditor.end_battery()
    if auditor.identity != pinned:
        raise AuditorIdentityError(
            f"auditor identity changed during the battery: {pinned} before, "
            f"{auditor.identity} after")
    return EvidenceFile(auditor_id=pinned, cases=tuple(cases))


def produce_evidence(labels: Path | Mapping[str, Any], auditor: PrefixAuditor, *,
                     evidence_output: Path, report_output: Path) -> dict[str, Any]:
    """Label pack (file or parsed JSON) in; evidence and gate report written; report returned."""
    pack = parse_labels(read_json(labels) if isinstance(labels, Path) else labels)
    evidence = replay(pack, auditor)
    write_json(evidence_output, evidence.to_json())
    report = evaluate(evidence)
    write_json(report_output, report)
    return report


if __name__ == "__main__":  # pragma: no cover - thin wrapper over the CLI's parser
    from turnaudit.evaluation.cli import configure_evidence, run_standalone

    sys.exit(run_standalone("python -m turnaudit.evaluation.evidence", configure_evidence))
