"""Independent labels for traces the pipeline assembles.

Two sources, neither of them the auditor under test:

* a finalized label pack (``turn-audit/evr6-labels``): its ``oracle_alarm_step``
  is already a step index of the reviewed trace, so the label is bound to that
  trace's content digest and applies to no other trace with the same task id;
* the simulator's ground truth (``turnaudit simulate --truth``): it names the
  task turn where the scripted failure happens, which becomes the step index
  of that turn in the assembled trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnaudit.evaluation.errors import EvidenceFormatError
from turnaudit.evaluation.files import LABELS_FORMAT, parse_labels, read_json, trace_digest
from turnaudit.htir import HtirTrace


@dataclass(frozen=True)
class TaskLabel:
    task_family: str
    oracle_source: str
    oracle_alarm_step: int | None = None  # a trace step index (label packs)
    oracle_alarm_turn: int | None = None  # a task turn (simulator ground truth)
    alarm_positive: bool = False
    # The content digest of the trace the label was reviewed on (label packs);
    # None for ground truth, which names a task turn rather than a reviewed trace.
    trace_digest: str | None = None

    def refusal(self, digest: str) -> str | None:
        """Why this label does not apply to a trace with content ``digest``, or None."""
        if self.trace_digest is None or self.trace_digest == digest:
            return None
        return (
            f"label reviewed on trace {self.trace_digest}, but the trace that arrived "
            f"is {digest}: its steps changed since review"
        )

    def step_for(self, trace: HtirTrace) -> tuple[bool, int | None]:
        """(usable, oracle step index) for this trace.

        Not usable when the label names a turn the trace never reached (it was
        closed early): that case cannot be scored honestly.
        """
        if not self.alarm_positive:
            return True, None
        if self.oracle_alarm_turn is not None:
            index = trace.turn_index(self.oracle_alarm_turn)
            return index is not None, index
        if self.oracle_alarm_step is not None and self.oracle_alarm_step < len(trace.steps):
            return True, self.oracle_alarm_step
        return False, None


def load_task_labels(path: Path) -> dict[str, TaskLabel]:
    raw = read_json(path)
    if not isinstance(raw, Mapping):
        raise EvidenceFormatError(f"{path}: expected a JSON object")
    if raw.get("format") == LABELS_FORMAT:
        pack = parse_labels(raw)  # refuses a pack carrying auditor output
        return {
            c.task_id: TaskLabel(
                c.task_family,
                c.oracle_source,
                oracle_alarm_step=c.oracle_alarm_step,
                alarm_positive=c.oracle_alarm_step is not None,
                trace_digest=trace_digest(c.trace.steps),
            )
            for c in pack.cases
        }
    if "tasks" in raw and "seed" in raw:
        try:
            return labels_from_ground_truth(raw)
        except (KeyError, TypeError) as exc:
            raise EvidenceFormatError(f"{path}: simulator ground truth without {exc}") from exc
    raise EvidenceFormatError(
        f"{path}: neither a label pack ({LABELS_FORMAT}) nor simulator ground truth"
    )


def _from_truth(task: Mapping[str, Any]) -> TaskLabel:
    turn = task["oracle_alarm_turn"]
    return TaskLabel(
        task["task_family"],
        task["oracle_source"],
        oracle_alarm_turn=turn,
        alarm_positive=turn is not None,
    )


def labels_from_ground_truth(truth: Mapping[str, Any]) -> dict[str, TaskLabel]:
    """Labels from the simulator's ground truth (``GroundTruth.as_json()``)."""
    return {t["task_id"]: _from_truth(t) for t in truth["tasks"]}
