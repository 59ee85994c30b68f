"""The consume loop: batches, offsets, rebalances, drain.

* Consumer-group member (static membership when the settings name an
  instance); batched ``consume``; each message goes through the service's
  validation, then the batch to its sink.
* At-least-once: ``enable.auto.offset.store=false``; a batch's offsets are
  stored only after the sink returned and its dead letters were settled
  (written whole, written truncated, or counted as failed); the
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
from collections.abc import Mapping
from types import FrameType
from typing import Any, cast

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry

from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics, MessageOutcome
from turnaudit.consumers.runtime.gc_sizing import batch_sized_gc
from turnaudit.consumers.runtime.health import ServiceHealth
from turnaudit.consumers.runtime.http import ServiceHttp
from turnaudit.consumers.runtime.sink import ConsumedTurn, Rejection, Sink
from turnaudit.consumers.runtime.validation import TurnEventValidation, Validation
from turnaudit.consumers.settings import ServiceSettings
from turnaudit.kafka.clients import ReliableProducer
from turnaudit.kafka.dead_letters import DeadLetterReason, DeadLetterWriter
from turnaudit.serialization.decoders import decoder_for
from turnaudit.serialization.wire import TurnEventDeserializer

log = structlog.get_logger("turnaudit.consumer")

# Options the delivery guarantee rests on; TURNAUDIT_KAFKA_OPTIONS cannot change them.
_CONSUMER_GUARANTEES: dict[str, Any] = {
    "enable.auto.offset.store": False,
    "enable.auto.commit": True,
}
_CONSUMER_DEFAULTS: dict[str, Any] = {
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
    ) -> None:
        self.settings = settings
        self.topic = topic or settings.kafka.topics.turn_events
        self.stage = f"{settings.service.value}/{settings.group_id}"
        self._sink = sink
        self._wants_breaching = sink.wants_breaching_turns
        self.metrics = ConsumerMetrics(registry)
        self._accepted = self.metrics.messages.labels(MessageOutcome.ACCEPTED.value)
        self._registry = registry
        self._validation = validation or TurnEventValidation(
            deserializer or decoder_for(settings.kafka, registry=registry),
            self.metrics,
            settings.max_sessions,
            settings.max_event_ids,
        )
        # Start positions for a fresh group (the demo reads only its own run);
        # applied once per partition, so a rebalance does not rewind.
        self._start_offsets = dict(start_offsets or {})
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._positions: dict[int, int] = {}  # next offset stored, per partition
        self._delivered_to: dict[int, int] = {}  # next offset the sink was handed, per partition
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
        self._consumer = Consumer(
            # The user's librdkafka options win over the defaults, never over
            # the guarantees (client_config layers them).
            settings.kafka.client_config(
                _CONSUMER_DEFAULTS,
                **{
                    "group.id": settings.group_id,
                    "auto.offset.reset": settings.auto_offset_reset,
                    **(
                        {"group.instance.id": settings.group_instance_id}
                        if settings.group_instance_id
                        else {}
                    ),
                    **_CONSUMER_GUARANTEES,
                },
                stats_cb=self._on_stats,
                error_cb=self.health.client_error,
            )
        )
        self._dead_letters = DeadLetterWriter(
            ReliableProducer(settings.kafka, error_cb=self.health.client_error),
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
        with self._lock:
            return dict(self._positions)

    def run(self) -> None:
        """Consume until ``stop()`` (or a signal), then drain and close."""
        if self._http is not None:
            self._http.start()
        self._consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self.health.running = True
        log.info(
            "consumer_started",
            topic=self.topic,
            group_id=self.settings.group_id,
            group_instance_id=self.settings.group_instance_id,
            http_port=self.http_port,
        )
        batch_sized_gc.enter(self.settings.batch_size)
        sink, health = self._sink, self.health
        try:
            while not self._stopping.is_set():
                health.last_loop = time.monotonic()
                messages = self._consumer.consume(
                    self.settings.batch_size, self.settings.batch_timeout_s
                )
                if messages:
                    self._handle_batch(messages)
                self._tick(sink)
        finally:
            health.running = False
            batch_sized_gc.exit()
            self._shutdown()

    def _tick(self, sink: Sink) -> None:
        try:
            sink.tick()
            held = sink.held_offsets()
        except Exception as exc:  # a sink may fail in any way; the next poll ticks again
            self.metrics.sink_failures.inc()
            log.error("sink_tick_failed", error=repr(exc))
            return
        if held is not None:
            # A tick may have released held offsets (a trace closed).
            self._store(self._delivered_to, held)

    # -- one batch ---------------------------------------------------------------
    def _handle_batch(self, messages: list[Message]) -> None:
        turns: list[ConsumedTurn] = []
        next_offsets: dict[int, int] = {}
        examine = self._validation.examine
        wants_breaching = self._wants_breaching
        # A sink that takes each turn as it is checked gets it at once, and the
        # decoded record goes as soon as the sink is done with it; any other
        # sink gets the batch's turns in ``write``.
        hand_over = self._sink.take if self._sink.takes_turns_as_read else turns.append
        handed = 0
        for msg in messages:
            error = msg.error()
            if error is not None:
                self._on_message_error(error)
                continue
            # _position(msg), inline: this loop runs once per message.
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if topic is None or partition is None or offset is None:
                _position(msg)  # raises, naming the message's error
                continue
            next_offsets[partition] = offset + 1
            try:
                turn = examine(msg.value(), msg.key(), topic, partition, offset)
            except Exception as exc:  # validations do not raise; if one does, still move on
                turn = Rejection(DeadLetterReason.UNDECODABLE, f"validation failed: {exc!r}")
            if type(turn) is ConsumedTurn:
                if turn.rejection is None:
                    hand_over(turn)
                    handed += 1
                    continue
                self._dead_letter(msg, turn.rejection)
                if wants_breaching:
                    hand_over(turn)
                    handed += 1
            else:
                self._dead_letter(msg, cast(Rejection, turn))
        if not self._deliver(turns, handed):
            return  # stopping before the batch was safe: it is redelivered, offsets untouched
        self._delivered_to.update(next_offsets)
        try:
            held = self._sink.held_offsets()
        except Exception as exc:  # counted like a failed tick; offsets wait for the next one
            self.metrics.sink_failures.inc()
            log.error("sink_held_offsets_failed", error=repr(exc))
            return
        self._store(next_offsets, held)
        self._accepted.inc(handed)

    def _store(self, next_offsets: Mapping[int, int], held: Mapping[int, int] | None) -> None:
        """Store offsets the sink has the data for, never past what it still holds."""
        if held is not None:
            next_offsets = {p: min(o, held.get(p, o)) for p, o in next_offsets.items()}
        assigned = set(self.health.partitions()) if next_offsets else set()
        with self._lock:
            advanced = {
                p: o for p, o in next_offsets.items()
                if p in assigned and o > self._positions.get(p, -1)
            }
            self._positions.update(advanced)
        if advanced:
            self._consumer.store_offsets(
                offsets=[TopicPartition(self.topic, p, o) for p, o in advanced.items()]
            )

    def _dead_letter(self, msg: Message, rejection: Rejection) -> None:
        topic, partition, offset = _position(msg)
        value = msg.value()
        self._dead_letters.write(
            value=value,
            key=msg.key(),
            original_headers=message_headers(msg),  # type: ignore[arg-type]
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

    def _deliver(self, turns: list[ConsumedTurn], handed: int) -> bool:
        """Sink write, then dead letters settled; retried until done or stopping."""
        attempt = 0
        written = handed == 0
        while True:
            try:
                if not written:
                    self._sink.write(turns)
                    written = True
                if self._dead_letters.pending() == 0 or self._dead_letters.flush(1.0) == 0:
                    return True
            except Exception as exc:  # a sink may fail in any way; the batch is retried
                self.metrics.sink_failures.inc()
                log.error("sink_write_failed", error=repr(exc), turns=handed, attempt=attempt)
            if self._stopping.is_set():
                log.warning("batch_abandoned_at_shutdown", turns=handed, written=written)
                return False
            self._stopping.wait(_SINK_RETRY_BACKOFF_S[min(attempt, len(_SINK_RETRY_BACKOFF_S) - 1)])
            attempt += 1

    # -- callbacks -----------------------------------------------------------------
    def _on_message_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        if error.fatal():
            raise KafkaException(error)
        self.health.client_error(error)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        starts = []
        for tp in partitions:
            start = self._start_offsets.pop(tp.partition, None)
            if start is not None:
                tp.offset = start
            starts.append(tp)
        if any(tp.offset >= 0 for tp in starts):
            consumer.assign(starts)
        self.health.assigned({tp.partition for tp in partitions})
        log.info("partitions_assigned", partitions=sorted(tp.partition for tp in partitions))
        self.assigned_once.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit([tp.partition for tp in partitions])
        self._forget(partitions)
        log.info("partitions_revoked", partitions=sorted(tp.partition for tp in partitions))

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Another member owns them already: committing now could rewind its work.
        self._forget(partitions)
        log.warning("partitions_lost", partitions=sorted(tp.partition for tp in partitions))

    def _forget(self, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        self.health.revoked(gone)
        with self._lock:
            for p in gone:
                self._positions.pop(p, None)
                self._delivered_to.pop(p, None)
        self._validation.forget_partitions(gone)
        try:
            self._sink.partitions_revoked(gone)
        except Exception as exc:  # a sink may fail in any way; the rebalance goes on
            self.metrics.sink_failures.inc()
            log.error("sink_partitions_revoked_failed", partitions=sorted(gone), error=repr(exc))
        for p in gone:
            with contextlib.suppress(KeyError):  # no statistics arrived for it yet
                self.metrics.lag.remove(self.topic, str(p))

    def _commit(self, partitions: list[int] | None = None) -> None:
        with self._lock:
            offsets = [
                TopicPartition(self.topic, p, o)
                for p, o in self._positions.items()
                if partitions is None or p in partitions
            ]
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
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
            self._sink.close()
        finally:
            if self._http is not None:
                self._http.close()
        log.info("consumer_stopped", group_id=self.settings.group_id)


def message_headers(msg: Message) -> list[tuple[str, bytes | None]]:
    """A consumed message's headers: a list of (name, bytes) pairs (the stubs allow more)."""
    return cast(list[tuple[str, bytes | None]], msg.headers() or [])


def _position(msg: Message) -> tuple[str, int, int]:
    """Topic, partition, offset of a consumed message (only error events lack them)."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise KafkaException(f"consumed message without a position: {msg.error()}")
    return topic, partition, offset
