"""The consume loop: poll, rebalance, drain.

* Consumer-group member (static membership when the settings name an
  instance) through ``turnaudit.kafka.consumer.KafkaConsumer``; batched
  ``consume``; each batch through the pure hand-over (``handover``), then
  the sink's ``flush``.
* At-least-once: ``enable.auto.offset.store=false``; a batch's offsets are
  stored only after the sink flushed and its dead letters were settled
  (written whole, written truncated, or counted as failed); the offset
  ledger (``ledger``) decides what may be stored and committed; the
  auto-committer commits stored offsets, and so do revocation and shutdown.
* No message stops the loop: validation turns anything into a turn or a
  rejection, and a rejection into a dead letter.
* SIGTERM/SIGINT drain: the batch in hand is finished, offsets committed,
  the group left, the sink closed.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType

import structlog
from prometheus_client import CollectorRegistry

from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics, MessageOutcome
from turnaudit.consumers.runtime.gc_sizing import batch_sized_gc
from turnaudit.consumers.runtime.handover import hand_over
from turnaudit.consumers.runtime.health import ServiceHealth
from turnaudit.consumers.runtime.http import ServiceHttp
from turnaudit.consumers.runtime.ledger import OffsetLedger
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings
from turnaudit.consumers.runtime.sink import Rejection, Sink
from turnaudit.consumers.runtime.timeline import (
    EXAMINED,
    FLUSHED,
    STORED,
    UNMARKED,
    BatchTimeline,
)
from turnaudit.consumers.runtime.validation import TurnEventValidation, Validation
from turnaudit.errors import BrokerError
from turnaudit.kafka.consumer import BULK_FETCH, KafkaConsumer
from turnaudit.kafka.dead_letters import DeadLetterWriter
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.records import Record, record_headers, record_position
from turnaudit.serialization.wire import TurnEventDeserializer

log = structlog.get_logger("turnaudit.consumer")

# Options the delivery guarantee rests on; TURNAUDIT_KAFKA_OPTIONS cannot change them.
_CONSUMER_GUARANTEES: dict[str, bool] = {
    "enable.auto.offset.store": False,
    "enable.auto.commit": True,
}
_CONSUMER_DEFAULTS: dict[str, int] = {
    "auto.commit.interval.ms": 1000,
    "statistics.interval.ms": 2000,  # feeds the lag gauge and readiness
    "fetch.wait.max.ms": 50,  # a quiet stream still arrives within the latency budget
    # librdkafka's own log lines (one per failed connection attempt, dozens a
    # second while the broker is away) stay off stderr; its errors reach
    # error_cb, which ServiceHealth reports at a bounded rate.
    "log_level": 0,
    # A broker that comes back is found within seconds, not after 10 s backoff.
    "reconnect.backoff.max.ms": 2000,
}
# The continuous verifier reads as a bulk reader fetches (``BULK_FETCH``). With
# librdkafka's defaults its queue ran dry while it proved a backlog (46 % of its loop's
# time waiting in consume, 101,946 turns/s against a bare loop's 236,920); with these,
# 174,485-180,631 against 242,002-250,261.
_FETCH_BY_SERVICE: dict[ServiceName, dict[str, int]] = {ServiceName.VERIFY_FOLLOW: BULK_FETCH}
_SINK_RETRY_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)


class ConsumerService:
    """Runs one sink on one topic (by default the turn events) in a consumer group."""

    def __init__(
        self,
        settings: ServiceSettings,
        sink: Sink,
        *,
        registry: CollectorRegistry,
        topic: str | None = None,
        validation: Validation | None = None,
        deserializer: TurnEventDeserializer | None = None,
        start_offsets: Mapping[int, int] | None = None,
        serve_http: bool = True,
        timeline: BatchTimeline | None = None,
    ) -> None:
        self.settings = settings
        # Where each batch's time went (the delay benchmark's evidence); None: unmarked.
        self.timeline = timeline
        self.topic = topic or settings.kafka.topics.turn_events
        self.stage = f"{settings.service.value}/{settings.group_id}"
        self.sink = sink
        self.metrics = ConsumerMetrics(
            registry, packs=settings.metrics.packs, pack_limit=settings.metrics.label_limit
        )
        self._accepted = self.metrics.messages.labels(MessageOutcome.ACCEPTED.value)
        self._redriven = self.metrics.messages.labels(MessageOutcome.REDRIVEN.value)
        self._registry = registry
        if validation is None:
            decoder = deserializer or decoder_for(settings.kafka, registry=registry)
            self.metrics.registry_retries.source = lambda: decoder.registry_retries
            validation = TurnEventValidation(
                decoder,
                self.metrics,
                settings.max_sessions,
                settings.max_event_ids,
            )
        self._validation = validation
        validation.deliver_to(sink, self._dead_letter)
        # Start positions for a fresh group (the demo reads only its own run);
        # applied once per partition, so a rebalance does not rewind.
        self._start_offsets = dict(start_offsets or {})
        self._stopping = threading.Event()
        self._ledger = OffsetLedger()
        self.assigned_once = threading.Event()
        self.health = ServiceHealth(
            {
                "service": settings.service.value,
                "group_id": settings.group_id,
                "group_instance_id": settings.group_instance_id,
                "topic": self.topic,
            },
            unassigned_bound_s=settings.unassigned_bound_s,
            report_interval_s=settings.client_error_report_s,
            on_client_error=self.metrics.client_errors.inc,
        )
        # The user's librdkafka options win over the defaults, never over the guarantees.
        self._consumer = KafkaConsumer(
            settings.kafka,
            self.topic,
            {**_CONSUMER_DEFAULTS, **_FETCH_BY_SERVICE.get(settings.service, {})},
            group_id=settings.group_id,
            on_error=self.health.client_error,
            on_stats=self._on_stats,
            fixed={
                "auto.offset.reset": settings.auto_offset_reset,
                **(
                    {"group.instance.id": settings.group_instance_id}
                    if settings.group_instance_id
                    else {}
                ),
                **_CONSUMER_GUARANTEES,
            },
        )
        self._dead_letters = DeadLetterWriter(
            KafkaProducer.reliable(settings.kafka, error_cb=self.health.client_error),
            settings.kafka.topics.dlq,
            self.stage,
            on_settled=self.metrics.dead_letter_settled,
        )
        self._http = (
            ServiceHttp(settings.http_host, settings.http_port, registry, self.health)
            if serve_http
            else None
        )

    # -- public ----------------------------------------------------------------
    @property
    def http_port(self) -> int | None:
        return None if self._http is None else self._http.port

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT drain and stop (main thread only, like ``signal``)."""

        def handle(signum: int, _frame: FrameType | None) -> None:
            log.info("consumer_stopping", signal=signal.Signals(signum).name)
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def stop(self) -> None:
        self.health.stopping = True
        self._stopping.set()

    def positions(self) -> dict[int, int]:
        """Next offset stored per partition (everything before it is in the sink)."""
        return self._ledger.stored()

    def handed_positions(self) -> dict[int, int]:
        """Next offset handed to the sink per partition (ahead of ``positions`` while
        the sink holds offsets back)."""
        return self._ledger.delivered_positions()

    def run(self) -> None:
        """Consume until ``stop()`` (or a signal), then drain and close."""
        if self._http is not None:
            self._http.start()
        self._consumer.subscribe(self)
        self.health.running = True
        log.info(
            "consumer_started",
            topic=self.topic,
            group_id=self.settings.group_id,
            group_instance_id=self.settings.group_instance_id,
            http_port=self.http_port,
        )
        batch_sized_gc.enter(self.settings.batch_size)
        consume, health = self._consumer.consume, self.health
        batch_size, timeout = self.settings.batch_size, self.settings.batch_timeout_s
        # Marks cost a few calls a poll, not a message: one loop whether marked or not.
        timeline = self.timeline or UNMARKED
        timeline.start()
        try:
            while not self._stopping.is_set():
                health.last_loop = time.monotonic()
                timeline.polling()
                records = consume(batch_size, timeout)
                if records:
                    timeline.polled(records)
                    self._handle_batch(records, timeline.lap)
                    timeline.abandoned()  # a batch that stopped short of storing
                self._tick()
        finally:
            timeline.stop()
            health.running = False
            batch_sized_gc.exit()
            self._shutdown()

    def _tick(self) -> None:
        try:
            self.sink.tick()
            held = self.sink.held_offsets()
        except Exception as exc:  # a sink may fail in any way; the next poll ticks again
            self.metrics.sink_failures.inc()
            log.error("sink_tick_failed", error=repr(exc))
            return
        if held is not None:
            # A tick may have released held offsets (a trace closed).
            stored = self._ledger.to_store(held)
            if stored:
                self._consumer.store(stored)

    # -- one batch ---------------------------------------------------------------
    def _handle_batch(
        self, records: list[Record], lap: Callable[[str], None] = UNMARKED.lap
    ) -> None:
        batch = self._validation.examine_batch(records) or hand_over(
            records,
            self._validation.examine,
            self.sink.take,
            self._dead_letter,
        )
        lap(EXAMINED)
        if not self._deliver(batch.handed):
            return  # stopping before the batch was safe: it is redelivered, offsets untouched
        lap(FLUSHED)
        self._ledger.delivered(batch.next_offsets)
        try:
            held = self.sink.held_offsets()
        except Exception as exc:  # counted like a failed tick; offsets wait for the next one
            self.metrics.sink_failures.inc()
            log.error("sink_held_offsets_failed", error=repr(exc))
            return
        stored = self._ledger.to_store(held, batch.next_offsets)
        if stored:
            self._consumer.store(stored)
        lap(STORED)
        self._accepted.inc(batch.handed - batch.redriven)
        if batch.redriven:
            self._redriven.inc(batch.redriven)

    def _dead_letter(self, record: Record, rejection: Rejection) -> None:
        topic, partition, offset = record_position(record)
        value = record.value()
        self._dead_letters.write(
            value=value,
            key=record.key(),
            original_headers=record_headers(record),
            reason=rejection.reason.value,
            error=rejection.error,
            topic=topic,
            partition=partition,
            offset=offset,
        )
        self.metrics.dead_letters.labels(rejection.reason.value).inc()
        self.metrics.messages.labels(MessageOutcome.DEAD_LETTERED.value).inc()
        log.warning(
            "turn_event_dead_lettered",
            reason=rejection.reason.value,
            error=rejection.error[:1000],
            event_id=rejection.event_id,
            topic=topic,
            partition=partition,
            offset=offset,
            size=len(value or b""),
        )

    def _deliver(self, handed: int) -> bool:
        """Sink flush, then dead letters settled; retried until done or stopping."""
        attempt = 0
        flushed = handed == 0
        while True:
            try:
                if not flushed:
                    self.sink.flush()
                    flushed = True
                if self._dead_letters.pending() == 0 or self._dead_letters.flush(1.0) == 0:
                    return True
            except Exception as exc:  # a sink may fail in any way; the batch is retried
                self.metrics.sink_failures.inc()
                log.error("sink_write_failed", error=repr(exc), turns=handed, attempt=attempt)
            if self._stopping.is_set():
                log.warning("batch_abandoned_at_shutdown", turns=handed, written=flushed)
                return False
            self._stopping.wait(_SINK_RETRY_BACKOFF_S[min(attempt, len(_SINK_RETRY_BACKOFF_S) - 1)])
            attempt += 1

    # -- rebalances (the consumer's RebalanceListener) ------------------------------
    def assigned(self, partitions: list[int]) -> Mapping[int, int]:
        starts = {p: o for p in partitions if (o := self._start_offsets.pop(p, None)) is not None}
        self._ledger.assigned(partitions)
        self.health.assigned(set(partitions))
        log.info("partitions_assigned", partitions=sorted(partitions))
        try:
            self.sink.partitions_assigned(set(partitions))
        except Exception as exc:  # a sink may fail in any way; the rebalance goes on
            self.metrics.sink_failures.inc()
            log.error(
                "sink_partitions_assigned_failed", partitions=sorted(partitions), error=repr(exc)
            )
        self.assigned_once.set()
        return starts

    def revoked(self, partitions: set[int]) -> None:
        self._commit(partitions)
        self._forget(partitions)
        log.info("partitions_revoked", partitions=sorted(partitions))

    def lost(self, partitions: set[int]) -> None:
        # Another member owns them already: committing now could rewind its work.
        self._forget(partitions)
        log.warning("partitions_lost", partitions=sorted(partitions))

    def _forget(self, gone: set[int]) -> None:
        self.health.revoked(gone)
        self._ledger.forget(gone)
        self._validation.forget_partitions(gone)
        try:
            self.sink.partitions_revoked(gone)
        except Exception as exc:  # a sink may fail in any way; the rebalance goes on
            self.metrics.sink_failures.inc()
            log.error("sink_partitions_revoked_failed", partitions=sorted(gone), error=repr(exc))
        for p in gone:
            with contextlib.suppress(KeyError):  # no statistics arrived for it yet
                self.metrics.lag.remove(self.topic, str(p))

    def _commit(self, partitions: set[int] | None = None) -> None:
        offsets = self._ledger.to_commit(partitions)
        if not offsets:
            return
        try:
            self._consumer.commit(offsets)
        except BrokerError as exc:
            log.warning("offset_commit_failed", error=str(exc))

    def _on_stats(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        if any(b.get("state") == "UP" for b in stats.get("brokers", {}).values()):
            self.health.broker_reachable()
        self.metrics.ready.set(1 if self.health.readiness().ok else 0)
        partitions = stats.get("topics", {}).get(self.topic, {}).get("partitions", {})
        assigned = set(self.health.partitions())
        for name, partition in partitions.items():
            lag = partition.get("consumer_lag_stored", -1)
            if name.lstrip("-").isdigit() and int(name) in assigned and lag >= 0:
                self.metrics.lag.labels(self.topic, name).set(lag)

    # -- shutdown -------------------------------------------------------------------
    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.settings.drain_timeout_s
        remaining = self._dead_letters.flush(max(0.0, deadline - time.monotonic()))
        if remaining:
            log.error("dead_letters_undelivered_at_shutdown", count=remaining)
        self._commit()
        self._consumer.close()  # leaves the group (a dynamic member's partitions move at once)
        try:
            self.sink.close()
        finally:
            if self._http is not None:
                self._http.close()
        log.info("consumer_stopped", group_id=self.settings.group_id)
