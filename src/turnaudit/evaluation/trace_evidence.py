"""Evidence from HTIR traces: which trace becomes a case, which is kept out and why.

The auditor-evaluation worker (live, on the traces topic) and ``turnaudit eval
rebuild`` (a replay of the turn stream) both build their evidence here, so the
same traces, labels and auditor give the same file.

A labelled trace becomes a case only when:

* it has no gap: a trace missing a middle turn (``HtirTrace.gap``) is kept out
  (``trace_missing_turns``), never renumbered into a shorter healthy-looking run;
* its content is the trace the label was reviewed on: a label-pack label is
  bound to the reviewed trace's content digest, and a different trace with
  the same task id is refused (``label_trace_changed``);
* the label's alarm step is in the trace (``label_step_not_in_trace``: the
  trace ended before the labelled turn).

Every refusal is an ``Exclusion`` in the evidence (reason, detail, source),
logged and counted. Cases and exclusions are ordered by task id, so the file
does not depend on the order traces arrived in.

Labels must not come from the auditor under test: once the battery pins it,
a label whose ``oracle_source`` names it (either tier, by name or digest) is
refused, naming the tasks (``turnaudit.evaluation.independence``).

The battery's end check comes first: ``finish`` asks the auditor to confirm it
is still the pinned one and only then returns the evidence; on a mismatch it
raises and there is no evidence.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from turnaudit.evaluation.auditors import PrefixAuditor
from turnaudit.evaluation.errors import AuditorIdentityError
from turnaudit.evaluation.evidence import observe_prefixes
from turnaudit.evaluation.files import (
    AuditorIdentity,
    Case,
    EvidenceFile,
    Exclusion,
    JsonObject,
    Observation,
    Trace,
    trace_digest,
)
from turnaudit.evaluation.independence import refuse_dependent_labels
from turnaudit.evaluation.labels import TaskLabel
from turnaudit.htir import HtirTrace

log = structlog.get_logger("turnaudit.evidence")


class ExclusionReason(enum.StrEnum):
    TRACE_MISSING_TURNS = "trace_missing_turns"
    LABEL_TRACE_CHANGED = "label_trace_changed"
    LABEL_STEP_NOT_IN_TRACE = "label_step_not_in_trace"


@dataclass
class EvidenceTally:
    traces: int = 0
    duplicates: int = 0
    labelled: int = 0  # cases in the evidence
    unlabelled: int = 0
    gapped: int = 0  # traces missing a middle turn, labelled or not
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> labelled traces
    by_close: dict[str, int] = field(default_factory=dict)

    @property
    def unusable_labels(self) -> int:
        """Labelled traces kept out of the evidence, whatever the reason."""
        return sum(self.excluded.values())


@dataclass(frozen=True)
class Admission:
    """What becomes of one trace: a case (with its label), an exclusion, or nothing."""

    label: TaskLabel | None
    oracle_step: int | None = None
    exclusion: Exclusion | None = None

    @property
    def is_case(self) -> bool:
        return self.label is not None and self.exclusion is None


def case_source(trace: HtirTrace) -> JsonObject:
    """A case's ``trace.source``: where the run came from, down to every turn's offset."""
    return {
        **trace.source,
        "session_id": trace.session_id,
        "closed_by": trace.closed_by.value if trace.closed_by else "unknown",
        "content_digest": trace_digest(trace.steps),
        "stream": trace.stream_ranges(),
    }


class TraceEvidence:
    """Labels and the pinned auditor applied to traces, one at a time."""

    def __init__(
        self,
        auditor: PrefixAuditor,
        labels: Mapping[str, TaskLabel],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._auditor = auditor
        self._labels = labels
        self._clock = clock
        self._cases: dict[str, Case] = {}
        self._exclusions: dict[str, Exclusion] = {}
        self._seen: set[str] = set()
        self._pinned: AuditorIdentity | None = None
        self.tally = EvidenceTally()

    @property
    def pinned(self) -> AuditorIdentity:
        if self._pinned is None:
            raise AuditorIdentityError("the battery has not begun: no auditor is pinned")
        return self._pinned

    def begin(self) -> AuditorIdentity:
        self._auditor.begin_battery()
        pinned = self._auditor.identity
        refuse_dependent_labels(
            [
                {"task_id": task_id, "oracle_source": label.oracle_source}
                for task_id, label in sorted(self._labels.items())
            ],
            pinned,
        )
        self._pinned = pinned
        return pinned

    def resume(self, previous: EvidenceFile, where: str) -> None:
        """Continue evidence (or a checkpoint) an earlier run of the same battery wrote."""
        if previous.auditor_id != self.pinned:
            raise AuditorIdentityError(
                f"{where} holds evidence for {previous.auditor_id}, not for the pinned "
                f"{self.pinned}: write to a new file"
            )
        for case in previous.cases:
            self._cases[case.task_id] = case
            self._seen.add(case.task_id)
        for exclusion in previous.exclusions:
            self._exclusions[exclusion.task_id] = exclusion
            self._seen.add(exclusion.task_id)
        self.tally.labelled += len(previous.cases)

    def seen(self, task_id: str) -> bool:
        return task_id in self._seen

    def admit(self, trace: HtirTrace) -> Admission:
        """Decide what the trace becomes; count and log it. Call once per task id."""
        self._seen.add(trace.task_id)
        self.tally.traces += 1
        closed = trace.closed_by.value if trace.closed_by else "unknown"
        self.tally.by_close[closed] = self.tally.by_close.get(closed, 0) + 1
        gap = trace.gap
        if gap is not None:
            self.tally.gapped += 1
        label = self._labels.get(trace.task_id)
        if label is None:
            self.tally.unlabelled += 1
            if gap is not None:
                log.warning("htir_trace_gap", task_id=trace.task_id, detail=gap, labelled=False)
            return Admission(None)
        if gap is not None:
            return self._exclude(trace, label, ExclusionReason.TRACE_MISSING_TURNS, gap)
        refusal = label.refusal(trace_digest(trace.steps))
        if refusal is not None:
            return self._exclude(trace, label, ExclusionReason.LABEL_TRACE_CHANGED, refusal)
        usable, oracle_step = label.step_for(trace)
        if not usable:
            named = (
                f"task turn {label.oracle_alarm_turn}"
                if label.oracle_alarm_turn is not None
                else f"step {label.oracle_alarm_step}"
            )
            return self._exclude(
                trace,
                label,
                ExclusionReason.LABEL_STEP_NOT_IN_TRACE,
                f"the label's alarm {named} is not in the trace ({len(trace.steps)} steps, "
                f"closed by {closed}): it cannot be scored honestly",
            )
        return Admission(label, oracle_step)

    def observe(self, trace: HtirTrace) -> tuple[Observation, ...]:
        """One fresh auditor call per prefix of the trace, timed."""
        return observe_prefixes(trace.steps, self._auditor, self._clock)

    def add_case(
        self, trace: HtirTrace, admission: Admission, observations: tuple[Observation, ...]
    ) -> None:
        label = admission.label
        if label is None or admission.exclusion is not None:
            raise ValueError(f"trace {trace.task_id} was not admitted as a case")
        self.tally.labelled += 1
        self._cases[trace.task_id] = Case(
            trace.task_id,
            label.task_family,
            label.oracle_source,
            admission.oracle_step,
            Trace(tuple(trace.steps), case_source(trace)),
            observations,
        )

    def snapshot(self) -> EvidenceFile:
        """The evidence so far, not yet confirmed by the end-of-battery check (checkpoints)."""
        return EvidenceFile(
            self.pinned,
            tuple(self._cases[k] for k in sorted(self._cases)),
            tuple(self._exclusions[k] for k in sorted(self._exclusions)),
        )

    def finish(self) -> EvidenceFile:
        """The end-of-battery identity check, then the evidence; no evidence on a mismatch."""
        pinned = self.pinned
        self._auditor.end_battery()  # raises when the served model was re-pointed
        if self._auditor.identity != pinned:
            raise AuditorIdentityError(
                f"auditor identity changed during the battery: {pinned} before, "
                f"{self._auditor.identity} after; no evidence written"
            )
        return self.snapshot()

    def _exclude(
        self, trace: HtirTrace, label: TaskLabel, reason: ExclusionReason, detail: str
    ) -> Admission:
        exclusion = Exclusion(trace.task_id, reason.value, detail, case_source(trace))
        self._exclusions[trace.task_id] = exclusion
        self.tally.excluded[reason.value] = self.tally.excluded.get(reason.value, 0) + 1
        log.warning(
            "evidence_trace_excluded", task_id=trace.task_id, reason=reason.value, detail=detail
        )
        return Admission(label, exclusion=exclusion)
