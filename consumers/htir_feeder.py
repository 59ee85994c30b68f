"""The HTIR feeder: a consumer-runtime sink that assembles per-task HTIR traces.

Turns of a task arrive in session order (the session is the Kafka key). A
trace closes on the runtime's end-of-task signal or after ``idle_timeout``
seconds without a turn, and is published to ``<prefix>htir-traces`` (Avro
single-object, ``schemas/htir_trace.v2.avsc``, key = task id) and, when
configured, appended to an eval-manifest JSONL file for review. A trace
records the partition and offset of every turn it was built from, and the
task steps missing from its middle, if any (logged as ``htir_trace_gap``; the
auditor worker keeps such a trace out of the evidence).

At-least-once across restarts: the offsets of turns that sit in a still-open
trace are held back (``held_offsets``), so a restarted feeder re-reads them and
rebuilds the trace; a trace already published may then be published again
with the same task id, which the auditor worker ignores. A trace is
acknowledged by its delivery report, served without waiting on each batch and
poll; one not stored for a transient reason is produced again, one refused for good
(too large, not authorised) is logged as an error; its offsets stay held either way.

A trace refused as too large is not taken at its word at once: librdkafka sends
a partition's queued messages in one batch and the broker refuses the whole
batch when one record in it is too large, so a trace that fits is refused with
an oversized neighbour. Such a trace is produced again *alone* (the producer
flushed before and after it, so no other message shares its batch), up to
``SIZE_RETRIES`` times, one retry per poll; only when refused alone (or once the
retries are spent) is it logged as refused for good, once. "Alone" holds only
as far as a flush within ``ALONE_FLUSH_S`` drains the queue: on a broker that
slow a retry may share a batch again, and the bounded retries make a trace
that fits refused for good rare, not impossible (its offsets stay held, so a
restart re-reads it). The feeder does not read the topic's ``max.message.bytes``
(an admin call, and the topic may change under it): the retry alone is the test.

Surfaces and tool I/O are in a trace (topic and manifest alike) only as the
surface policy lets them through (``TURNAUDIT_LOG_SURFACES``, dropped by
default; ``turnaudit.redaction``); the manifest file is its owner's only. Sealed
turns are opened first with the surface keyring (``opener``,
``turnaudit.sealing.opening``), placeholders without it.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, ClassVar, NamedTuple, Protocol, cast

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from turnaudit._native import ConsumeStep
from turnaudit.consumers.runtime import BatchingSink, ConsumedTurn
from turnaudit.consumers.runtime.line_files import cut_torn_tail
from turnaudit.consumers.runtime.sink import StepOutlet, StepRun, StepStop
from turnaudit.files import open_private
from turnaudit.htir import HtirTrace, TaskTurn, TraceAssembler
from turnaudit.kafka.producer import (
    DeliveredMessage,
    DeliveryCallback,
    DeliveryError,
    KafkaProducer,
    is_permanent,
    is_size_error,
)
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.sealing.opening import TurnOpener
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.htir_feeder")

# Times a trace refused as too large is produced again alone before it is
# refused for good (the first refusal may be its batch's, not its own).
SIZE_RETRIES = 2
# How long each flush around a retry alone may wait: two per poll at most, well
# inside the loop's liveness bound (consumers/runtime/health.py, 30 s).
ALONE_FLUSH_S = 5.0


class TraceProducer(Protocol):
    """What the feeder needs of its producer (``KafkaProducer`` is one)."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
        serve_reports: bool = True,
    ) -> None: ...
    def poll(self, timeout: float = 0.0) -> int: ...
    def flush(self, timeout: float) -> int: ...


class ProducedTrace(NamedTuple):
    """A closed trace as the feeder keeps it until its delivery report: its record's bytes
    and what its acknowledgement says. The trace itself (its steps, a dict each) is let go
    once produced: kept for a round trip to the broker, it outlived the collector's young
    generation and was traversed again by the older ones."""

    task_id: str
    value: bytes
    closed_by: str
    gap: str | None
    missing_task_steps: tuple[int, ...]
    manifest_line: str | None  # the JSON line, where the feeder writes a manifest


class HtirFeederSink(BatchingSink):
    # Tracks its own progress (held offsets): no redelivery marks.
    marks_redeliveries: ClassVar[bool] = False

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        registry: CollectorRegistry,
        idle_timeout: float = 300.0,
        manifest: Path | None = None,
        redaction: Redaction = DROPPED,
        producer: TraceProducer | None = None,
        opener: TurnOpener | None = None,
    ) -> None:
        super().__init__()
        self._handed_natively = 0  # turns without a task the native step handed since flush
        self._open_sealed = opener  # sealed turns opened before the policy (turn_opener)
        self._redaction = redaction
        self._topic = kafka.topics.htir_traces
        self._serialize = SingleObjectSerializer(shipped_catalog("htir_trace").latest)
        self._producer: TraceProducer = producer or KafkaProducer.reliable(kafka)
        self._assembler = TraceAssembler(idle_timeout, redaction=redaction)
        # A trace republished after a restart is written to the manifest once;
        # a line torn by a kill is cut, and its trace written again whole.
        if manifest:
            cut_torn_tail(manifest)
        self._in_manifest = _manifest_task_ids(manifest) if manifest else set()
        self._manifest: IO[str] | None = (
            open_private(manifest, "a", parents=True)  # open for the service's life
            if manifest
            else None
        )
        # Where each held trace's first turn was read (task id -> (partition, offset)), and
        # the same by partition: the held offsets are a minimum per partition, taken in C
        # over one partition's offsets (asked twice a batch over every held trace).
        self._first_offsets: dict[str, tuple[int, int]] = {}
        self._held: dict[int, dict[str, int]] = {}
        self.published = 0
        # Traces produced whose delivery report has not been served yet, and
        # the reports served (by ``poll``/``flush``) not yet settled.
        self._unacked = 0
        self._reports: list[tuple[ProducedTrace, DeliveryError | None]] = []
        # Traces refused as too large, waiting to be produced again alone, and
        # how often each was refused so.
        self._alone: deque[ProducedTrace] = deque()
        self._size_refusals: dict[str, int] = {}
        self._traces = Counter(
            "turnaudit_htir_traces_total", "HTIR traces published", ["closed_by"], registry=registry
        )
        self._open = Gauge(
            "turnaudit_htir_open_traces", "Traces still being assembled", registry=registry
        )
        self._skipped = Gauge(
            "turnaudit_htir_partial_turns_skipped",
            "Turns of tasks whose trace was already published (re-read after a restart, "
            "or arriving after an idle close)",
            registry=registry,
        )

    @property
    def open_traces(self) -> int:
        return self._assembler.open_traces

    def step_outlet(self) -> StepOutlet:
        # An ordinary turn with a task comes made into its trace steps (a ``TaskTurn``),
        # or, where sealed turns are opened first, as the validation would build it; one
        # without a task is only counted: ``write_batch`` keeps nothing of it.
        if self._open_sealed is not None:
            return {"turn": (tuple.__new__, ConsumedTurn)}
        redaction = self._redaction
        return {"steps": (tuple.__new__, TaskTurn, redaction.policy.value, redaction.text)}

    def step_runner(self, step: ConsumeStep) -> StepRun:
        run_turns = step.run_turns

        def run(batch: list[Any], index: int, next_offsets: dict[int, int]) -> StepStop:
            stop = run_turns(batch, index, self._pending, next_offsets)
            self._handed_natively += stop[5]
            return stop

        return run

    def flush(self) -> None:
        # A batch whose turns (without a task) the native step handed over ends as one
        # of pending turns does: in ``write_batch`` (idle traces expire there too).
        if self._pending or self._handed_natively:
            self.write_batch(self._pending)
            self._pending, self._handed_natively = [], 0  # written: a failure keeps them

    def write_batch(self, turns: Sequence[ConsumedTurn | TaskTurn]) -> None:
        closed: list[HtirTrace] = []
        assembler = self._assembler
        run: list[TaskTurn] = []  # the native step's turns, their steps made: added a run at once
        for turn in turns:
            if type(turn) is TaskTurn:
                run.append(turn)
                continue
            consumed = cast(ConsumedTurn, turn)
            event = consumed.event
            task = event["task"]
            if task is None:
                continue
            task_id = task["task_id"]
            if self._open_sealed is not None:
                self._open_sealed(event)
            self._add(run, closed)
            run = []
            trace = assembler.add(
                event,
                topic=consumed.topic,
                partition=consumed.partition,
                offset=consumed.offset,
                breaches=consumed.breaches,
            )
            if trace is not None or assembler.is_open(task_id):
                self._hold(task_id, consumed.partition, consumed.offset)
            if trace is not None:
                closed.append(trace)
        self._add(run, closed)
        closed.extend(assembler.expire())
        self._skipped.set(assembler.partial_turns_skipped)
        self._publish(closed)

    def _add(self, run: list[TaskTurn], closed: list[HtirTrace]) -> None:
        """Add a run of task turns; each trace a turn joined is held (until acknowledged on
        the traces topic) from the first turn of it seen."""
        if not run:
            return
        traces, joined = self._assembler.add_task_turns(run)
        closed += traces
        first_offsets = self._first_offsets
        for turn in joined:
            if turn.task_id not in first_offsets:
                self._hold(turn.task_id, turn.partition, turn.offset)

    def _hold(self, task_id: str, partition: int, offset: int) -> None:
        if task_id not in self._first_offsets:
            self._first_offsets[task_id] = (partition, offset)
            self._held.setdefault(partition, {})[task_id] = offset

    def tick(self) -> None:
        """Called by the runtime on every poll, so idle traces close on a quiet stream."""
        self._publish(self._assembler.expire())

    def held_offsets(self) -> dict[int, int]:
        """Per partition, the first offset a still-open trace needs re-read after a crash."""
        return {partition: min(held.values()) for partition, held in self._held.items() if held}

    def partitions_revoked(self, partitions: set[int]) -> None:
        """Open traces of partitions now read by another feeder are dropped,
        not published: their turns' offsets were held back, so the new owner
        re-reads them from step 0 and publishes the whole trace (an idle close
        here would publish a trace missing the steps it reads)."""
        dropped = self._assembler.forget_partitions(partitions)
        # Offsets held for those partitions go too, a closed trace's not yet
        # acknowledged included: held on, they would pull the partition's
        # committed offset back if it came back to this feeder.
        self._first_offsets = {
            task_id: held
            for task_id, held in self._first_offsets.items()
            if held[0] not in partitions
        }
        for partition in partitions:
            self._held.pop(partition, None)
        self._open.set(self._assembler.open_traces)
        if dropped:
            log.info(
                "htir_open_traces_handed_over", partitions=sorted(partitions), open=len(dropped)
            )

    def close(self) -> None:
        # Open traces are not published on shutdown: their offsets were held
        # back, so the next feeder rebuilds them whole.
        if self._assembler.open_traces:
            log.info("htir_open_traces_left_for_restart", open=self._assembler.open_traces)
        self._producer.flush(30)
        self._settle(retry=False)  # a trace not stored keeps its offsets held
        # The traces waiting to go alone go now, each report settled (bounded:
        # a trace goes alone SIZE_RETRIES times at most).
        while self._alone or self._reports:
            self._settle(retry=False)
        if self._manifest is not None:
            self._manifest.close()

    def _publish(self, traces: list[HtirTrace]) -> None:
        for trace in traces:
            self._produce(self._produced(trace))
        # A trace counts as published once acknowledged (its delivery report);
        # until then its turns' offsets stay held back (a slow broker delays
        # them, loses nothing). Reports are served here without waiting, so a
        # batch does not stall on a round trip to the broker.
        if self._unacked or self._alone:
            self._producer.poll(0)
            self._settle(retry=True)
        self._open.set(self._assembler.open_traces)

    def _produced(self, trace: HtirTrace) -> ProducedTrace:
        gap = trace.gap
        return ProducedTrace(
            trace.task_id,
            self._serialize(trace.avro_record()),
            trace.closed_by.value if trace.closed_by else "unknown",
            gap,
            tuple(trace.missing_task_steps) if gap is not None else (),
            None if self._manifest is None else json.dumps(trace.manifest_line()) + "\n",
        )

    def _produce(self, trace: ProducedTrace) -> None:
        def report(err: DeliveryError | None, _msg: DeliveredMessage) -> None:
            self._reports.append((trace, err))

        self._producer.produce(
            self._topic,
            trace.value,
            trace.task_id.encode(),
            on_delivery=report,
            serve_reports=False,  # served once after a batch's traces (``_publish``)
        )
        self._unacked += 1

    def _settle(self, *, retry: bool) -> None:
        """Acknowledge the delivered traces; produce a failed one again (its
        offsets stay held until it is stored), one refused as too large alone;
        then produce the next trace waiting to go alone."""
        reports, self._reports = self._reports, []
        self._unacked -= len(reports)
        delivered = [trace for trace, err in reports if err is None]
        for trace, err in reports:
            if err is None:
                continue
            task_id = trace.task_id
            refusals = self._size_refusals.get(task_id, 0)
            if is_size_error(err) and refusals < SIZE_RETRIES:
                # Maybe its batch's size, not its own: it goes again alone.
                self._size_refusals[task_id] = refusals + 1
                log.warning(
                    "htir_trace_not_stored",
                    task_id=task_id,
                    error=err.str(),
                    retried=True,
                    alone=True,
                )
                self._alone.append(trace)
            elif retry and not is_permanent(err):
                log.warning("htir_trace_not_stored", task_id=task_id, error=err.str(), retried=True)
                self._produce(trace)
            else:
                # Producing it again cannot help (too large alone, not authorised, ...):
                # its offsets stay held (a restart re-reads and rebuilds it), and it is
                # said once.
                self._size_refusals.pop(task_id, None)
                log.error("htir_trace_not_stored", task_id=task_id, error=err.str(), retried=False)
        if delivered:
            self._acknowledged(delivered)
        if self._alone:
            self._produce_alone(self._alone.popleft())

    def _produce_alone(self, trace: ProducedTrace) -> None:
        """Produce ``trace`` in a batch of its own: the queue drained before it,
        and its report served before anything else is produced (one per poll)."""
        self._producer.flush(ALONE_FLUSH_S)
        self._produce(trace)
        self._producer.flush(ALONE_FLUSH_S)

    def _acknowledged(self, traces: list[ProducedTrace]) -> None:
        # Each published trace is counted by how it closed, and said in one line per
        # acknowledged batch (one line per trace would cost the feeder as much as
        # assembling it); a trace with a gap is logged on its own.
        closed_by: dict[str, int] = {}
        for trace in traces:
            first = self._first_offsets.pop(trace.task_id, None)
            if first is not None:
                del self._held[first[0]][trace.task_id]
            self._size_refusals.pop(trace.task_id, None)
            if trace.gap is not None:
                log.warning(
                    "htir_trace_gap",
                    task_id=trace.task_id,
                    detail=trace.gap,
                    missing_task_steps=list(trace.missing_task_steps),
                )
            closed_by[trace.closed_by] = closed_by.get(trace.closed_by, 0) + 1
            line = trace.manifest_line
            if self._manifest is not None and line and trace.task_id not in self._in_manifest:
                self._in_manifest.add(trace.task_id)
                self._manifest.write(line)
        for label, count in closed_by.items():
            self._traces.labels(label).inc(count)
        log.info(
            "htir_traces_published",
            traces=len(traces),
            closed_by=closed_by,
            first_task_id=traces[0].task_id,
            last_task_id=traces[-1].task_id,
        )
        if self._manifest is not None:
            self._manifest.flush()
        self.published += len(traces)


def _manifest_task_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with path.open(encoding="utf-8") as lines:
        return {json.loads(line)["task_id"] for line in lines if line.strip()}
