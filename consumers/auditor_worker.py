"""The auditor-evaluation worker: HTIR traces in, auditor observations out.

It consumes ``<prefix>htir-traces`` in its own group, replays every prefix of
each trace through the pinned auditor (one fresh call per prefix, no caching),
publishes the observations to ``<prefix>auditor-observations`` (Avro single-object,
``schemas/auditor_observation.v1.avsc``, announced on the schemas topic; keyed by
task id), and accumulates an EVR-6 evidence file for the traces it holds
independent labels for. Offsets are stored only after the observations were
acknowledged (at-least-once); a trace seen again is not replayed twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import Consumer, Message, TopicPartition
from prometheus_client import CollectorRegistry, Counter

from turnaudit.errors import SerializationError, TurnAuditError
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
from turnaudit.kafka.dead_letters import DeadLetterReason, dead_letter_headers
from turnaudit.serialization.schema_topic import announce_schema
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.auditor_worker")


@dataclass
class WorkerTally:
    traces: int = 0
    duplicates: int = 0
    labelled: int = 0
    unusable_labels: int = 0  # labelled, but the trace ended before the labelled turn
    unlabelled: int = 0
    dead_letters: int = 0
    by_close: dict[str, int] = field(default_factory=dict)


class AuditorEvaluationWorker:
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
    ) -> None:
        self._kafka = kafka
        self._auditor = auditor
        self._labels = labels
        self._clock = clock
        self._topic = kafka.topics.htir_traces
        self._decode = TurnEventDeserializer(shipped_catalog("htir_trace"))  # any shipped record
        self._consumer = Consumer(
            kafka.client_config(
                **{
                    "group.id": group_id,
                    "auto.offset.reset": "earliest",
                    "enable.auto.offset.store": False,
                    "enable.auto.commit": True,
                    "log_level": 3,
                }
            )
        )
        self._producer = ReliableProducer(kafka)
        self._encode = SingleObjectSerializer(shipped_catalog("auditor_observation").latest)
        announce_schema(self._producer.produce, kafka.topics.schemas, self._encode.schema)
        # Where a fresh group starts per partition (the demo reads its own run).
        self._start_offsets = dict(start_offsets or {})
        self._evidence_path = evidence_path
        self._cases: dict[str, Case] = {}
        self._seen: set[str] = set()
        self.tally = WorkerTally()
        self._stopping = threading.Event()
        self._traces = Counter(
            "turnaudit_auditor_traces_total",
            "HTIR traces replayed through the pinned auditor",
            ["first_verdict"],
            registry=registry,
        )

    def stop(self) -> None:
        self._stopping.set()

    def run(self, until: Callable[[WorkerTally], bool] | None = None) -> None:
        """Consume until ``stop()`` or until ``until(tally)`` is true."""
        self._auditor.begin_battery()
        self._pinned = self._auditor.identity
        self._resume_evidence()
        self._consumer.subscribe([self._topic], on_assign=self._on_assign)
        try:
            while not self._stopping.is_set() and not (until and until(self.tally)):
                messages = self._consumer.consume(100, 0.2)
                labelled = len(self._cases)
                for msg in messages:
                    if msg.error() is None:
                        self._handle(msg)
                if self._evidence_path is not None and len(self._cases) != labelled:
                    # On disk before the offsets move: a crash loses no case.
                    write_json(self._evidence_path, self.evidence().to_json())
                if messages and self._producer.flush(30) == 0:
                    for msg in messages:
                        if msg.error() is None:
                            self._consumer.store_offsets(message=msg)
        finally:
            self._producer.flush(30)
            self._consumer.close()
            self._auditor.end_battery()

    def _resume_evidence(self) -> None:
        """Continue the evidence file a previous run of this worker wrote."""
        if self._evidence_path is None or not self._evidence_path.exists():
            return
        previous = parse_evidence(read_json(self._evidence_path))
        if previous.auditor_id != self._pinned:
            raise TurnAuditError(
                f"{self._evidence_path} holds evidence for {previous.auditor_id}, "
                f"not for the pinned {self._pinned}: write to a new file"
            )
        for case in previous.cases:
            self._cases[case.task_id] = case
            self._seen.add(case.task_id)
        self.tally.labelled += len(previous.cases)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            start = self._start_offsets.pop(tp.partition, None)
            if start is not None:
                tp.offset = start
        consumer.assign(partitions)

    def evidence(self) -> EvidenceFile:
        """The labelled cases so far, with their observations."""
        if self._auditor.identity != self._pinned:
            raise TurnAuditError("the auditor's identity changed during the run")
        return EvidenceFile(self._pinned, tuple(self._cases.values()))

    def _handle(self, msg: Message) -> None:
        try:
            trace = HtirTrace.from_avro(self._decode(msg.value()).event)
        except (SerializationError, KeyError, ValueError) as exc:
            self.tally.dead_letters += 1
            self._producer.produce(
                self._kafka.topics.dlq,
                msg.value() or b"",
                msg.key() or b"",
                headers=dead_letter_headers(
                    reason=DeadLetterReason.UNDECODABLE,
                    error=str(exc),
                    topic=self._topic,
                    partition=msg.partition(),
                    offset=msg.offset(),
                    stage="auditor-worker",
                ),
            )
            return
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
                    "auditor_id": self._pinned.to_json(),
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


def evidence_summary(evidence: EvidenceFile) -> dict[str, Any]:
    positives = sum(1 for c in evidence.cases if c.oracle_alarm_step is not None)
    return {
        "cases": len(evidence.cases),
        "alarm_positive": positives,
        "healthy": len(evidence.cases) - positives,
        "families": sorted({c.task_family for c in evidence.cases}),
    }
