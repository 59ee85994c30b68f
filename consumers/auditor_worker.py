"""The auditor-evaluation worker: HTIR traces in, auditor observations out.

It runs on the consumer runtime like every service (group member, offsets
stored after the sink has the data, dead letters, ``/metrics``, ``/healthz``),
on ``<prefix>htir-traces`` in its own group. Its sink replays every prefix of
each trace through the pinned auditor (one fresh call per prefix, no
caching), publishes the observations to ``<prefix>auditor-observations``
(Avro single-object, ``schemas/auditor_observation.v1.avsc``, announced on the
schemas topic; keyed by task id), and accumulates an EVR-6 evidence file for the
traces it holds independent labels for. A batch returns only once its
observations were acknowledged and the evidence is on disk (at-least-once); a
trace seen again is not replayed twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter

from turnaudit.consumers.runtime import (
    ConsumedTurn,
    ConsumerService,
    HtirTraceValidation,
    Sink,
)
from turnaudit.consumers.settings import ServiceName, ServiceSettings
from turnaudit.errors import TurnAuditError
from turnaudit.evaluation.auditors import PrefixAuditor
from turnaudit.evaluation.evidence import observe_prefixes
from turnaudit.evaluation.files import (
    Case,
    EvidenceFile,
    Trace,
    parse_evidence,
    read_json,
    write_json,
)
from turnaudit.evaluation.labels import TaskLabel
from turnaudit.htir import HtirTrace
from turnaudit.kafka.clients import ReliableProducer
from turnaudit.serialization.decoders import decoder_for
from turnaudit.serialization.schema_topic import announce_schema
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.auditor_worker")

_ACK_TIMEOUT_S = 30.0


@dataclass
class WorkerTally:
    traces: int = 0
    duplicates: int = 0
    labelled: int = 0
    unusable_labels: int = 0  # labelled, but the trace ended before the labelled turn
    unlabelled: int = 0
    by_close: dict[str, int] = field(default_factory=dict)


class AuditorSink(Sink):
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
        self._kafka = kafka
        self._auditor = auditor
        self._labels = labels
        self._clock = clock
        self._evidence_path = evidence_path
        self._producer = ReliableProducer(kafka)
        self._encode = SingleObjectSerializer(shipped_catalog("auditor_observation").latest)
        announce_schema(self._producer.produce, kafka.topics.schemas, self._encode.schema)
        self._cases: dict[str, Case] = {}
        self._seen: set[str] = set()
        self.tally = WorkerTally()
        self.until: Callable[[WorkerTally], bool] | None = None
        self.on_done: Callable[[], None] | None = None
        self._traces = Counter(
            "turnaudit_auditor_traces_total",
            "HTIR traces replayed through the pinned auditor",
            ["first_verdict"],
            registry=registry,
        )

    def begin(self) -> None:
        self._auditor.begin_battery()
        self.pinned = self._auditor.identity
        self._resume_evidence()

    def write(self, turns: Sequence[ConsumedTurn]) -> None:
        labelled = len(self._cases)
        for turn in turns:
            self._handle(HtirTrace.from_avro(turn.decoded.event))
        if self._producer.flush(_ACK_TIMEOUT_S) != 0:
            raise TurnAuditError("auditor observations not acknowledged")  # batch retried
        if self._evidence_path is not None and len(self._cases) != labelled:
            # On disk before the offsets move: a crash loses no case.
            write_json(self._evidence_path, self.evidence().to_json())

    def tick(self) -> None:
        if self.until is not None and self.on_done is not None and self.until(self.tally):
            self.on_done()

    def close(self) -> None:
        self._producer.flush(_ACK_TIMEOUT_S)
        self._auditor.end_battery()

    def _resume_evidence(self) -> None:
        """Continue the evidence file a previous run of this worker wrote."""
        if self._evidence_path is None or not self._evidence_path.exists():
            return
        previous = parse_evidence(read_json(self._evidence_path))
        if previous.auditor_id != self.pinned:
            raise TurnAuditError(
                f"{self._evidence_path} holds evidence for {previous.auditor_id}, "
                f"not for the pinned {self.pinned}: write to a new file"
            )
        for case in previous.cases:
            self._cases[case.task_id] = case
            self._seen.add(case.task_id)
        self.tally.labelled += len(previous.cases)

    def evidence(self) -> EvidenceFile:
        """The labelled cases so far, with their observations."""
        if self._auditor.identity != self.pinned:
            raise TurnAuditError("the auditor's identity changed during the run")
        return EvidenceFile(self.pinned, tuple(self._cases.values()))

    def _handle(self, trace: HtirTrace) -> None:
        if trace.task_id in self._seen:
            self.tally.duplicates += 1
            return
        self._seen.add(trace.task_id)
        self.tally.traces += 1
        closed = trace.closed_by.value if trace.closed_by else "unknown"
        self.tally.by_close[closed] = self.tally.by_close.get(closed, 0) + 1
        observations = observe_prefixes(trace.steps, self._auditor, self._clock)
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
        label = self._labels.get(trace.task_id)
        if label is None:
            self.tally.unlabelled += 1
            return
        usable, oracle_step = label.step_for(trace)
        if not usable:
            self.tally.unusable_labels += 1
            return
        self.tally.labelled += 1
        self._cases[trace.task_id] = Case(
            trace.task_id,
            label.task_family,
            label.oracle_source,
            oracle_step,
            Trace(
                tuple(trace.steps),
                {**trace.source, "session_id": trace.session_id, "closed_by": closed},
            ),
            observations,
        )


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
            base, kafka=kafka, group_id=group_id, batch_size=min(base.batch_size, 100),
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

    def run(self, until: Callable[[WorkerTally], bool] | None = None) -> None:
        """Consume until ``stop()`` (or a signal) or until ``until(tally)`` is true."""
        self.sink.until = until
        self.sink.begin()
        self.service.run()

    def evidence(self) -> EvidenceFile:
        return self.sink.evidence()


def evidence_summary(evidence: EvidenceFile) -> dict[str, Any]:
    positives = sum(1 for c in evidence.cases if c.oracle_alarm_step is not None)
    return {
        "cases": len(evidence.cases),
        "alarm_positive": positives,
        "healthy": len(evidence.cases) - positives,
        "families": sorted({c.task_family for c in evidence.cases}),
    }
