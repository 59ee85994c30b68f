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
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, ClassVar, NamedTuple, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from turnaudit._native import ConsumeStep
from turnaudit.consumers.runtime import BatchingSink, ConsumedTurn
from turnaudit.consumers.runtime.line_files import cut_torn_tail
from turnaudit.consumers.runtime.sink import StepOutlet, StepRun, StepStop
from turnaudit.files import open_private
from turnaudit.htir import EncodedTrace, decoded_trace, trace_store
from turnaudit.htir_steps import task_turn
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
    """A closed trace as the feeder keeps it until its delivery report: the store's record
    of it (its bytes, what its acknowledgement says, where its first turn was read) and the
    serial its offset is held by."""

    trace: EncodedTrace
    manifest_line: str | None  # the JSON line, where the feeder writes a manifest
    serial: int


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
        # Traces closed since the last flush (by the native step or ``take``), to publish,
        # and those held and not yet handed to the producer.
        self._closed: list[EncodedTrace] = []
        self._waiting: list[ProducedTrace] = []
        self._open_sealed = opener  # sealed turns opened before the policy (turn_opener)
        self._redaction = redaction
        self._topic = kafka.topics.htir_traces
        self._producer: TraceProducer = producer or KafkaProducer.reliable(kafka)
        # The traces being assembled (native: their records are written there as they close).
        self._store = trace_store()
        self._idle_timeout = idle_timeout
        self._clock = time.monotonic
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
        # Where each closed trace not yet acknowledged read its first turn, by partition and
        # serial (the store holds its open traces' own): a minimum per partition, taken in C.
        self._held: dict[int, dict[int, int]] = {}
        self._serial = 0
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
        return int(self._store.open_traces)

    def step_outlet(self) -> StepOutlet:
        # An ordinary turn with a task is added to its trace in the store by the native
        # step, or, where sealed turns are opened first, comes as the validation would
        # build it; one without a task is only counted.
        if self._open_sealed is not None:
            return {"turn": (tuple.__new__, ConsumedTurn)}
        redaction = self._redaction
        return {"traces": (self._store, redaction.policy.value, redaction.text)}

    def step_runner(self, step: ConsumeStep) -> StepRun:
        # Sealed: the turns into the pending batch; else the closed traces into ``_closed``,
        # the run's turns seen at its start.
        run_turns, clock = step.run_turns, self._clock
        sealed = self._open_sealed is not None
        into = self._pending if sealed else self._closed

        def run(batch: list[Any], index: int, next_offsets: dict[int, int]) -> StepStop:
            return run_turns(batch, index, into, next_offsets, 0.0 if sealed else clock())

        return run

    def take(self, turn: ConsumedTurn) -> None:
        # Added at once, as the native step adds the turns around it (the order a task's
        # turns join its trace is the order they were read); sealed turns wait for the
        # batch's end, with the native step's, to be opened first.
        if self._open_sealed is not None:
            self._pending.append(turn)
        else:
            self._add(turn)

    def flush(self) -> None:
        # Every batch that handed turns over (natively or to ``take``) ends here: the
        # closed traces are published, idle ones close too.
        self.write_batch(self._pending)
        self._pending.clear()  # written: a failure keeps them

    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        for turn in turns:
            self._add(turn)
        store = self._store
        self._closed += store.expire(self._clock() - self._idle_timeout)
        self._skipped.set(store.partial_turns_skipped)
        self._publish()

    def _add(self, consumed: ConsumedTurn) -> None:
        """A turn the Python path took (or, sealed, every one) added to its trace."""
        event = consumed.event
        if event["task"] is None:
            return
        if self._open_sealed is not None:
            self._open_sealed(event)
        made = task_turn(
            event,
            consumed.topic,
            consumed.partition,
            consumed.offset,
            contract_breaches=consumed.breaches,
            redaction=self._redaction,
        )
        if made is not None:
            self._closed += self._store.add_task_turns((made,), self._clock())

    def tick(self) -> None:
        """Called by the runtime on every poll, so idle traces close on a quiet stream."""
        self._closed += self._store.expire(self._clock() - self._idle_timeout)
        self._publish()

    def held_offsets(self) -> dict[int, int]:
        """Per partition, the first offset a trace still open, or closed and not yet
        acknowledged, needs re-read after a crash."""
        held: dict[int, int] = self._store.held_offsets()
        for partition, closed in self._held.items():
            if closed:
                first = min(closed.values())
                if first < held.get(partition, first + 1):
                    held[partition] = first
        return held

    def partitions_revoked(self, partitions: set[int]) -> None:
        """Open traces of partitions now read by another feeder are dropped,
        not published: their turns' offsets were held back, so the new owner
        re-reads them from step 0 and publishes the whole trace (an idle close
        here would publish a trace missing the steps it reads)."""
        dropped = self._store.forget_partitions(sorted(partitions))
        # Offsets held for those partitions go too, a closed trace's not yet
        # acknowledged included: held on, they would pull the partition's
        # committed offset back if it came back to this feeder.
        for partition in partitions:
            self._held.pop(partition, None)
        self._open.set(self._store.open_traces)
        if dropped:
            log.info(
                "htir_open_traces_handed_over", partitions=sorted(partitions), open=len(dropped)
            )

    def close(self) -> None:
        # Open traces are not published on shutdown: their offsets were held
        # back, so the next feeder rebuilds them whole.
        if self._store.open_traces:
            log.info("htir_open_traces_left_for_restart", open=self._store.open_traces)
        self._producer.flush(30)
        self._settle(retry=False)  # a trace not stored keeps its offsets held
        # The traces waiting to go alone go now, each report settled (bounded:
        # a trace goes alone SIZE_RETRIES times at most).
        while self._alone or self._reports:
            self._settle(retry=False)
        if self._manifest is not None:
            self._manifest.close()

    def _publish(self) -> None:
        # Each closed trace held once (``_produced``), then produced; one the producer
        # refused to take (a full queue raised) is produced again on the next publish.
        self._waiting += map(self._produced, self._closed)
        self._closed.clear()
        produced = 0
        try:
            for trace in self._waiting:
                self._produce(trace)
                produced += 1
        finally:
            del self._waiting[:produced]
        # A trace counts as published once acknowledged (its delivery report);
        # until then its turns' offsets stay held back (a slow broker delays
        # them, loses nothing). Reports are served here without waiting, so a
        # batch does not stall on a round trip to the broker.
        if self._unacked or self._alone:
            self._producer.poll(0)
            self._settle(retry=True)
        self._open.set(self._store.open_traces)

    def _produced(self, trace: EncodedTrace) -> ProducedTrace:
        """``trace`` held (its first turn's offset) until acknowledged, by a serial of its
        own: a task's trace closed again (re-read after a restart) is held apart."""
        self._serial += 1
        self._held.setdefault(trace.partition, {})[self._serial] = trace.first_offset
        line = None
        if self._manifest is not None:
            line = json.dumps(decoded_trace(trace).manifest_line()) + "\n"
        return ProducedTrace(trace, line, self._serial)

    def _produce(self, trace: ProducedTrace) -> None:
        def report(err: DeliveryError | None, _msg: DeliveredMessage) -> None:
            self._reports.append((trace, err))

        self._producer.produce(
            self._topic,
            trace.trace.value,
            trace.trace.task_id.encode(),
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
            task_id = trace.trace.task_id
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
        for produced in traces:
            trace = produced.trace
            held = self._held.get(trace.partition)  # gone if the partition was revoked
            if held is not None:
                held.pop(produced.serial, None)
            self._size_refusals.pop(trace.task_id, None)
            if trace.gap is not None:
                log.warning(
                    "htir_trace_gap",
                    task_id=trace.task_id,
                    detail=trace.gap,
                    missing_task_steps=list(trace.missing_task_steps),
                )
            closed_by[trace.closed_by] = closed_by.get(trace.closed_by, 0) + 1
            line = produced.manifest_line
            if self._manifest is not None and line and trace.task_id not in self._in_manifest:
                self._in_manifest.add(trace.task_id)
                self._manifest.write(line)
        for label, count in closed_by.items():
            self._traces.labels(label).inc(count)
        log.info(
            "htir_traces_published",
            traces=len(traces),
            closed_by=closed_by,
            first_task_id=traces[0].trace.task_id,
            last_task_id=traces[-1].trace.task_id,
        )
        if self._manifest is not None:
            self._manifest.flush()
        self.published += len(traces)


def _manifest_task_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with path.open(encoding="utf-8") as lines:
        return {json.loads(line)["task_id"] for line in lines if line.strip()}
