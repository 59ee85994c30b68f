"""The auditor-evaluation worker: HTIR traces in, auditor observations out.

It runs on the consumer runtime like every service (group member, offsets
stored after the sink has the data, dead letters, ``/metrics``, ``/healthz``),
on ``<prefix>htir-traces`` in its own group. Its sink replays every prefix of
each trace through the pinned auditor (one fresh call per prefix, no
caching), publishes the observations to ``<prefix>auditor-observations``
(Avro single-object, ``schemas/auditor_observation.v*.avsc``, whose writer
schemas the runtime announces on the schemas topic; keyed by task id), and
builds EVR-6 evidence for the traces it holds independent labels for
(``turnaudit.evaluation.trace_evidence``: a label applies only to the trace it
was reviewed on, a trace missing a turn is kept out, each with its reason in
the evidence's ``exclusions``).

A batch returns only once its observations were acknowledged and the work so
far is in a checkpoint on disk (``<evidence>.checkpoint.json``, not an evidence
file; at-least-once, a restarted worker continues it); a trace seen again is
not replayed twice. The evidence file itself is written only when the worker
stops, after the end-of-battery check has confirmed the auditor is still the
pinned one; on a mismatch there is no evidence and the worker says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter

from turnaudit.consumers.runtime import (
    BatchingSink,
    ConsumedTurn,
    ConsumerService,
    HtirTraceValidation,
)
from turnaudit.consumers.settings import ServiceName, ServiceSettings
from turnaudit.errors import TurnAuditError
from turnaudit.evaluation.auditors import PrefixAuditor
from turnaudit.evaluation.errors import EvidenceFormatError
from turnaudit.evaluation.files import (
    EVIDENCE_FORMAT,
    AuditorIdentity,
    EvidenceFile,
    parse_evidence,
    read_json,
    write_json,
)
from turnaudit.evaluation.labels import TaskLabel
from turnaudit.evaluation.trace_evidence import EvidenceTally, TraceEvidence
from turnaudit.htir import HtirTrace
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.serialization.decoders import decoder_for
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.auditor_worker")

_ACK_TIMEOUT_S = 30.0
CHECKPOINT_FORMAT = "turn-audit/evr6-evidence-checkpoint"

# The worker's tally is the evidence builder's (traces, labelled, excluded by reason, ...).
WorkerTally = EvidenceTally


def checkpoint_path(evidence_path: Path) -> Path:
    return evidence_path.with_name(evidence_path.name + ".checkpoint.json")


def _write_checkpoint(path: Path, evidence: EvidenceFile) -> None:
    # Another format on purpose: a checkpoint is not evidence and no gate accepts it.
    write_json(path, {**evidence.to_json(), "format": CHECKPOINT_FORMAT})


def _read_checkpoint(path: Path) -> EvidenceFile:
    raw = read_json(path)
    if not isinstance(raw, dict) or raw.get("format") != CHECKPOINT_FORMAT:
        raise EvidenceFormatError(f"{path} is not an evidence checkpoint")
    return parse_evidence({**raw, "format": EVIDENCE_FORMAT})


class AuditorSink(BatchingSink):
    """Replays each new trace through the auditor; observations out, evidence kept."""

    def __init__(
        self,
        kafka: KafkaSettings,
        auditor: PrefixAuditor,
        labels: Mapping[str, TaskLabel],
        *,
        registry: CollectorRegistry,
        evidence_path: Path | None,
        clock: Callable[[], float],
    ) -> None:
        super().__init__()
        self._kafka = kafka
        self._evidence_path = evidence_path
        self._checkpoint = checkpoint_path(evidence_path) if evidence_path else None
        self._producer = KafkaProducer.reliable(kafka)
        self._encode = SingleObjectSerializer(shipped_catalog("auditor_observation").latest)
        self.builder = TraceEvidence(auditor, labels, clock)
        self._finished: EvidenceFile | None = None
        self.until: Callable[[WorkerTally], bool] | None = None
        self.on_done: Callable[[], None] | None = None
        self._traces = Counter(
            "turnaudit_auditor_traces_total",
            "HTIR traces replayed through the pinned auditor",
            ["first_verdict"],
            registry=registry,
        )
        self._excluded = Counter(
            "turnaudit_auditor_traces_excluded_total",
            "Labelled traces kept out of the evidence (label bound to another trace, "
            "trace missing a turn, labelled step not in the trace)",
            ["reason"],
            registry=registry,
        )

    @property
    def tally(self) -> WorkerTally:
        return self.builder.tally

    @property
    def pinned(self) -> AuditorIdentity:
        return self.builder.pinned

    def begin(self) -> None:
        self.builder.begin()
        self._resume_evidence()

    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        before = self.tally.traces
        for turn in turns:
            self._handle(HtirTrace.from_avro(turn.decoded.event))
        if self._producer.flush(_ACK_TIMEOUT_S) != 0:
            raise TurnAuditError("auditor observations not acknowledged")  # batch retried
        if self._checkpoint is not None and self.tally.traces != before:
            # On disk before the offsets move: a crash loses no case.
            _write_checkpoint(self._checkpoint, self.builder.snapshot())

    def tick(self) -> None:
        if self.until is not None and self.on_done is not None and self.until(self.tally):
            self.on_done()

    def close(self) -> None:
        self._producer.flush(_ACK_TIMEOUT_S)

    def finish(self) -> EvidenceFile:
        """The end-of-battery check first; then the evidence file, then the checkpoint goes.

        On a mismatch the checkpoint is removed too (its observations are not
        known to come from the pinned model) and nothing is written.
        """
        try:
            evidence = self.builder.finish()
        except TurnAuditError:
            if self._checkpoint is not None:
                self._checkpoint.unlink(missing_ok=True)
            raise
        if self._evidence_path is not None:
            write_json(self._evidence_path, evidence.to_json())
        if self._checkpoint is not None:
            self._checkpoint.unlink(missing_ok=True)
        self._finished = evidence
        return evidence

    def _resume_evidence(self) -> None:
        """Continue the checkpoint (or the evidence) a previous run of this worker wrote."""
        if self._evidence_path is None or self._checkpoint is None:
            return
        if self._checkpoint.exists():
            self.builder.resume(_read_checkpoint(self._checkpoint), str(self._checkpoint))
        elif self._evidence_path.exists():
            self.builder.resume(
                parse_evidence(read_json(self._evidence_path)), str(self._evidence_path)
            )

    def evidence(self) -> EvidenceFile:
        """The evidence, once ``finish`` confirmed the auditor's identity."""
        if self._finished is None:
            raise TurnAuditError("no evidence before the end-of-battery identity check")
        return self._finished

    def _handle(self, trace: HtirTrace) -> None:
        if self.builder.seen(trace.task_id):
            self.tally.duplicates += 1
            return
        admission = self.builder.admit(trace)
        if admission.exclusion is not None:
            self._excluded.labels(admission.exclusion.reason).inc()
        observations = self.builder.observe(trace)
        first_alarm = next((o.prefix_end for o in observations if o.verdict == "alarm"), None)
        self._traces.labels("alarm" if first_alarm is not None else "ok").inc()
        self._producer.produce(
            self._kafka.topics.auditor_observations,
            self._encode(
                {
                    "task_id": trace.task_id,
                    "task_family": trace.task_family,
                    "auditor_id": self.pinned.to_json(),
                    "first_alarm_step": first_alarm,
                    "observations": [o.to_json() for o in observations],
                    "source": trace.source,
                }
            ),
            trace.task_id.encode(),
        )
        if admission.is_case:
            self.builder.add_case(trace, admission, observations)


class AuditorEvaluationWorker:
    """The worker as a service: the runtime on the traces topic with an ``AuditorSink``."""

    def __init__(
        self,
        kafka: KafkaSettings,
        auditor: PrefixAuditor,
        labels: Mapping[str, TaskLabel],
        *,
        group_id: str,
        registry: CollectorRegistry,
        start_offsets: Mapping[int, int] | None = None,
        evidence_path: Path | None = None,
        clock: Callable[[], float] = time.perf_counter,
        settings: ServiceSettings | None = None,
        serve_http: bool = False,
    ) -> None:
        """``settings``: the service's (HTTP port, instance id, ...); by default
        those of an in-process worker with no HTTP side."""
        base = settings or ServiceSettings(
            ServiceName.AUDITOR_WORKER, kafka, group_id, http_host="127.0.0.1", http_port=0
        )
        # Traces are few and each costs many auditor calls: small batches.
        self.settings = replace(
            base,
            kafka=kafka,
            group_id=group_id,
            batch_size=min(base.batch_size, 100),
            batch_timeout_s=max(base.batch_timeout_s, 0.2),
        )
        self.sink = AuditorSink(
            kafka, auditor, labels, registry=registry, evidence_path=evidence_path, clock=clock
        )
        self.service = ConsumerService(
            self.settings,
            self.sink,
            registry=registry,
            topic=kafka.topics.htir_traces,
            validation=HtirTraceValidation(decoder_for(kafka, "htir_trace", schemas_topic=False)),
            start_offsets=start_offsets,
            serve_http=serve_http,
        )
        self.sink.on_done = self.service.stop

    @property
    def tally(self) -> WorkerTally:
        return self.sink.tally

    @property
    def http_port(self) -> int | None:
        return self.service.http_port

    def install_signal_handlers(self) -> None:
        self.service.install_signal_handlers()

    def stop(self) -> None:
        self.service.stop()

    def run(self, until: Callable[[WorkerTally], bool] | None = None) -> EvidenceFile:
        """Consume until ``stop()`` (or a signal) or until ``until(tally)`` is true; then
        the end-of-battery check, and only then the evidence (written when configured)."""
        self.sink.until = until
        self.sink.begin()
        self.service.run()
        return self.sink.finish()

    def evidence(self) -> EvidenceFile:
        return self.sink.evidence()


def evidence_summary(evidence: EvidenceFile) -> dict[str, Any]:
    positives = sum(1 for c in evidence.cases if c.oracle_alarm_step is not None)
    return {
        "cases": len(evidence.cases),
        "alarm_positive": positives,
        "healthy": len(evidence.cases) - positives,
        "families": sorted({c.task_family for c in evidence.cases}),
        "excluded": len(evidence.exclusions),
    }
