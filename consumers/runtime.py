"""The consumer runtime every service shares: read, decode, check, hand to a sink.

* Consumer-group member; batched ``consume``; every message decoded (either
  framing, any schema version) into the current reader's shape.
* PIPELINE.md's contracts on every event: 1-4 by ``check_event``, 6 by
  ``check_key``, 5 and 7 by the stream tracker (``turnaudit.identity``: dedupe
  by event id, gaps and late arrivals per ordered stream, the hash chain).
  Undecodable or contract-breaking messages (a key that is not the session id
  included) go to ``<prefix>.dlq`` with the original bytes and ``dlq.*`` headers; sequence
  gaps are counted and logged (the message itself is fine). Nothing is
  dropped without a count and a log line, and no message stops the service.
* At-least-once: ``enable.auto.offset.store=false``; a batch's offsets are
  stored only after the sink returned and its dead letters were acknowledged;
  the auto-committer commits stored offsets, and so do revocation and shutdown.
* SIGTERM/SIGINT drain: the batch in hand is finished, offsets committed,
  the group left, the sink closed.
* ``/metrics`` (Prometheus text) and ``/healthz`` over HTTP; a per-partition
  consumer-lag gauge from librdkafka's statistics.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Protocol, cast

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from turnaudit.consumers.settings import ServiceSettings
from turnaudit.contracts import Contract, check_event, check_key, identity_breach
from turnaudit.errors import SchemaNotFoundError, SerializationError, UnknownFramingError
from turnaudit.identity import Placement, StreamTracker, TrackResult, TurnOutcome
from turnaudit.kafka.clients import PRODUCER_DEFAULTS, RELIABLE_PRODUCER
from turnaudit.kafka.dead_letters import (
    HEADER_PREFIX,
    DeadLetterReason,
    dead_letter_headers,
    read_dead_letter_headers,
)
from turnaudit.serialization.schema_topic import SchemaTopicResolver
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import DecodedTurnEvent, TurnEventDeserializer, registry_client

log = structlog.get_logger("turnaudit.consumer")

# Options the delivery guarantee rests on; TURNAUDIT_KAFKA_OPTIONS cannot change them.
_CONSUMER_GUARANTEES: dict[str, Any] = {
    "enable.auto.offset.store": False,
    "enable.auto.commit": True,
}
_CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.commit.interval.ms": 1000,
    "statistics.interval.ms": 2000,  # feeds the lag gauge
    "fetch.wait.max.ms": 50,  # a quiet stream still arrives within the latency budget
    "log_level": 3,
}
_HEALTHY_LOOP_AGE_S = 30.0  # a loop silent for longer than this is stuck
# Container objects a consumed message keeps alive until its batch is done
# (decoded record, its nested dicts and lists, the turn, a sink's own per-turn
# objects), with room to spare; see ``_BatchSizedGC``.
_GC_OBJECTS_PER_MESSAGE = 50
_SINK_RETRY_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)


class MessageOutcome(enum.StrEnum):
    ACCEPTED = "accepted"  # handed to the sink
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True, slots=True)
class ConsumedTurn:
    """A decoded, contract-checked event and where it was read."""

    decoded: DecodedTurnEvent
    sequence: Placement  # new, late or redelivered (turnaudit.identity)
    topic: str
    partition: int
    offset: int
    # Contract breaches; non-empty only for sinks that ask for breaching turns
    # (the turn also went to the dead-letter topic).
    breaches: tuple[str, ...] = ()

    @property
    def event(self) -> dict[str, Any]:
        return self.decoded.event


class Sink(Protocol):
    """Where a service puts the turns it consumed.

    ``write`` returns once the sink holds the batch (flushed to its output,
    or counted); raising makes the runtime retry the same batch, and its
    offsets are stored only after a successful write.
    """

    def write(self, turns: Sequence[ConsumedTurn]) -> None: ...

    def close(self) -> None: ...


# Optional sink methods, looked up on the sink when present:
#   tick() -> None                    called on every poll, even an empty one
#                                     (a sink that closes work on a quiet stream);
#   held_offsets() -> dict[int, int]  per partition, the first offset the sink
#                                     still needs after a restart: stored
#                                     offsets never pass it;
#   wants_breaching_turns = True      also hand over turns that broke a contract
#                                     (with their breaches), besides the DLQ.
Tick = Callable[[], None]
HeldOffsets = Callable[[], dict[int, int]]


class ConsumerMetrics:
    """What every service exports about its consumption."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages = Counter(
            "turnaudit_consumer_messages",
            "Messages consumed, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "turnaudit_dead_letters",
            "Messages sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=registry,
        )
        self.contract_breaches = Counter(
            "turnaudit_contract_breaches",
            "Contract breaches found (PIPELINE.md 1-5), by contract.",
            ["contract"],
            registry=registry,
        )
        self.sequence_gaps = Counter(
            "turnaudit_sequence_gaps",
            "Sessions whose sequence numbers skipped (turns missing).",
            registry=registry,
        )
        self.missing_turns = Counter(
            "turnaudit_sequence_missing_turns",
            "Sequence numbers skipped by gaps.",
            registry=registry,
        )
        self.redelivered = Counter(
            "turnaudit_redelivered_turns",
            "Events whose event id was already seen (a redelivery or a duplicate copy).",
            registry=registry,
        )
        # Turn identity (turnaudit.identity): what each message was for its ordered stream.
        # New turns and the missing figure are read from the tracker at scrape time:
        # nothing to update per message.
        self.new_turns = _TrackerCount(
            "turnaudit_new_turns",
            "Turns seen for the first time (by event id), late arrivals included.",
        )
        registry.register(self.new_turns)
        self.gaps_closed = Counter(
            "turnaudit_stream_gaps_closed",
            "Missing positions filled by a late arrival.",
            registry=registry,
        )
        self.currently_missing = Gauge(
            "turnaudit_stream_missing_turns",
            "Positions of ordered streams skipped and not (yet) arrived.",
            registry=registry,
        )
        self.chain_breaks = Counter(
            "turnaudit_chain_breaks",
            "Hash-chain breaks, events ids with other content and reused positions, by kind.",
            ["kind"],
            registry=registry,
        )
        self.key_mismatches = Counter(
            "turnaudit_key_mismatches",
            "Messages whose Kafka key is not their session id (dead-lettered).",
            registry=registry,
        )
        self.dead_letter_failures = Counter(
            "turnaudit_dead_letter_failures",
            "Dead letters the broker refused for good (the original message is named in the log).",
            registry=registry,
        )
        self.sink_failures = Counter(
            "turnaudit_sink_failures",
            "Batches the sink could not take (retried).",
            registry=registry,
        )
        self.lag = Gauge(
            "turnaudit_consumer_lag",
            "Messages behind the partition's end (stored offset).",
            ["topic", "partition"],
            registry=registry,
        )
        # Every closed-set label value exists from the start at 0, so rate()
        # and increase() see the first event of each kind.
        for outcome in MessageOutcome:
            self.messages.labels(outcome.value)
        for reason in DeadLetterReason:
            self.dead_letters.labels(reason.value)
        for contract in Contract:
            self.contract_breaches.labels(contract.value)
        for kind in _CHAIN_BREAK_KINDS:
            self.chain_breaks.labels(kind)

    def watch(self, tracker: StreamTracker) -> None:
        """Export the figures the stream tracker keeps itself."""
        self.new_turns.source = lambda: tracker.new_turns
        self.currently_missing.set_function(lambda: tracker.currently_missing)


class _TrackerCount(Collector):
    """A counter whose value an object of the service keeps (read at scrape time)."""

    def __init__(self, name: str, documentation: str) -> None:
        self._name = name
        self._documentation = documentation
        self.source: Callable[[], int] = lambda: 0

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self._name, self._documentation, value=self.source())


_CHAIN_BREAK_KINDS = ("chain", TurnOutcome.CONTENT_CHANGED.value, TurnOutcome.POSITION_REUSED.value)

_DECODE_FAILURES: tuple[tuple[type[SerializationError], DeadLetterReason], ...] = (
    (UnknownFramingError, DeadLetterReason.UNKNOWN_FRAMING),
    (SchemaNotFoundError, DeadLetterReason.UNKNOWN_SCHEMA),
    (SerializationError, DeadLetterReason.UNDECODABLE),
)


def contract_reason(contract: Contract) -> DeadLetterReason:
    return DeadLetterReason(f"contract:{contract.value}")


class ConsumerService:
    """Runs one sink on the turn-events topic in a consumer group."""

    def __init__(
        self,
        settings: ServiceSettings,
        sink: Sink,
        *,
        registry: CollectorRegistry,
        deserializer: TurnEventDeserializer | None = None,
        start_offsets: Mapping[int, int] | None = None,
        serve_http: bool = True,
    ) -> None:
        self.settings = settings
        self.topic = settings.kafka.topics.turn_events
        self._dlq_topic = settings.kafka.topics.dlq
        self.stage = f"{settings.service.value}/{settings.group_id}"
        self._sink = sink
        self._tick: Tick | None = getattr(sink, "tick", None)
        self._held_offsets: HeldOffsets | None = getattr(sink, "held_offsets", None)
        self._wants_breaching = bool(getattr(sink, "wants_breaching_turns", False))
        self.metrics = ConsumerMetrics(registry)
        self._registry = registry
        self._decode = deserializer or default_deserializer(settings)
        self._sequences = StreamTracker(max_streams=settings.max_sessions)
        self.metrics.watch(self._sequences)
        # Start positions for a fresh group (the demo reads only its own run);
        # applied once per partition, so a rebalance does not rewind.
        self._start_offsets = dict(start_offsets or {})
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._assigned: set[int] = set()
        self._positions: dict[int, int] = {}  # next offset stored, per partition
        self._delivered_to: dict[int, int] = {}  # next offset the sink was handed, per partition
        self._dlq_undelivered = 0
        self._last_loop = time.monotonic()
        self._running = False
        self.assigned_once = threading.Event()
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
                error_cb=self._on_error,
            )
        )
        self._dlq = Producer(
            # Retried until delivered: a dead letter is never lost.
            settings.kafka.client_config(
                PRODUCER_DEFAULTS, **RELIABLE_PRODUCER, error_cb=self._on_error
            )
        )
        self._http: ThreadingHTTPServer | None = None
        if serve_http:
            self._http = ThreadingHTTPServer(
                (settings.http_host, settings.http_port), _handler_for(self)
            )
            self._http.daemon_threads = True

    # -- public ----------------------------------------------------------------
    @property
    def http_port(self) -> int | None:
        return None if self._http is None else int(self._http.server_address[1])

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT drain and stop (main thread only, like ``signal``)."""

        def handle(signum: int, _frame: FrameType | None) -> None:
            log.info("consumer_stopping", signal=signal.Signals(signum).name)
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def stop(self) -> None:
        self._stopping.set()

    def positions(self) -> dict[int, int]:
        """Next offset stored per partition (everything before it is in the sink)."""
        with self._lock:
            return dict(self._positions)

    def health(self) -> dict[str, Any]:
        with self._lock:
            assigned = sorted(self._assigned)
        age = time.monotonic() - self._last_loop
        healthy = self._running and not self._stopping.is_set() and age < _HEALTHY_LOOP_AGE_S
        return {
            "status": "ok" if healthy else "unhealthy",
            "service": self.settings.service.value,
            "group_id": self.settings.group_id,
            "topic": self.topic,
            "assigned_partitions": assigned,
            "seconds_since_poll": round(age, 3),
        }

    def run(self) -> None:
        """Consume until ``stop()`` (or a signal), then drain and close."""
        if self._http is not None:
            threading.Thread(
                target=self._http.serve_forever, name="turnaudit-http", daemon=True
            ).start()
        self._consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._running = True
        log.info(
            "consumer_started",
            topic=self.topic,
            group_id=self.settings.group_id,
            http_port=self.http_port,
        )
        _batch_sized_gc.enter(self.settings.batch_size)
        try:
            while not self._stopping.is_set():
                self._last_loop = time.monotonic()
                messages = self._consumer.consume(
                    self.settings.batch_size, self.settings.batch_timeout_s
                )
                if messages:
                    self._handle_batch(messages)
                if self._tick is not None:
                    self._tick_safely(self._tick)
                    # A tick may have released held offsets (a trace closed).
                    self._store(self._delivered_to)
        finally:
            self._running = False
            _batch_sized_gc.exit()
            self._shutdown()

    def _tick_safely(self, tick: Tick) -> None:
        try:
            tick()
        except Exception as exc:  # a sink may fail in any way; the next poll ticks again
            self.metrics.sink_failures.inc()
            log.error("sink_tick_failed", error=repr(exc))

    # -- one batch ---------------------------------------------------------------
    def _handle_batch(self, messages: list[Message]) -> None:
        turns: list[ConsumedTurn] = []
        next_offsets: dict[int, int] = {}
        for msg in messages:
            error = msg.error()
            if error is not None:
                self._on_message_error(error)
                continue
            where = _position(msg)
            next_offsets[where[1]] = where[2] + 1
            turn = self._examine(msg, where)
            if turn is not None:
                turns.append(turn)
        if not self._deliver(turns):
            return  # stopping before the batch was safe: it is redelivered, offsets untouched
        self._delivered_to.update(next_offsets)
        self._store(next_offsets)
        self.metrics.messages.labels(MessageOutcome.ACCEPTED.value).inc(len(turns))

    def _store(self, next_offsets: Mapping[int, int]) -> None:
        """Store offsets the sink has the data for, never past what it still holds."""
        if self._held_offsets is not None:
            held = self._held_offsets()
            next_offsets = {p: min(o, held.get(p, o)) for p, o in next_offsets.items()}
        with self._lock:
            advanced = {
                p: o for p, o in next_offsets.items()
                if p in self._assigned and o > self._positions.get(p, -1)
            }
            self._positions.update(advanced)
        if advanced:
            self._consumer.store_offsets(
                offsets=[TopicPartition(self.topic, p, o) for p, o in advanced.items()]
            )

    def _examine(self, msg: Message, where: tuple[str, int, int]) -> ConsumedTurn | None:
        """The decoded, checked turn, or None when it went to the dead-letter topic."""
        try:
            decoded = self._decode(msg.value())
        except SerializationError as exc:
            reason = next(r for kind, r in _DECODE_FAILURES if isinstance(exc, kind))
            self._dead_letter(msg, where, reason, str(exc))
            return None
        event = decoded.event
        try:
            sequence = self._sequences.observe(
                event, msg.value() or b"", partition=where[1], offset=where[2]
            )
            key_breach = check_key(msg.key(), event)
            breaches = ([key_breach] if key_breach else []) + check_event(event)
        except (KeyError, TypeError, ValueError) as exc:
            # Decodable but not shaped like a TurnEvent (a foreign schema gone wrong).
            self._dead_letter(msg, where, DeadLetterReason.UNDECODABLE, f"not a TurnEvent: {exc!r}")
            return None
        self._count_identity(sequence, key_breach is not None, where)
        if breaches:
            for breach in breaches:
                self.metrics.contract_breaches.labels(breach.contract.value).inc()
            self._dead_letter(
                msg,
                where,
                contract_reason(breaches[0].contract),
                "; ".join(map(str, breaches)),
                event_id=event.get("event_id"),
            )
            if not self._wants_breaching:
                return None
            return ConsumedTurn(decoded, sequence, *where, tuple(map(str, breaches)))
        return ConsumedTurn(decoded, sequence, *where)

    def _count_identity(
        self, result: TrackResult, key_mismatch: bool, where: tuple[str, int, int]
    ) -> None:
        """The stream tracker's verdict on one message, in the metrics and the log."""
        if (
            result.outcome is TurnOutcome.NEW
            and not result.missing_opened
            and result.chain_break is None
            and not key_mismatch
        ):
            return  # the common case: counted by the tracker itself
        metrics = self.metrics
        if result.redelivered:
            metrics.redelivered.inc()
        if result.missing_opened:
            metrics.sequence_gaps.inc()
            metrics.missing_turns.inc(result.missing_opened)
            metrics.contract_breaches.labels(Contract.SEQUENCE.value).inc()
        if result.gap_closed:
            metrics.gaps_closed.inc()
        if key_mismatch:
            metrics.key_mismatches.inc()
        breach = identity_breach(result)
        if breach is not None:
            kind = result.outcome.value if result.outcome.value in _CHAIN_BREAK_KINDS else "chain"
            metrics.chain_breaks.labels(kind).inc()
            metrics.contract_breaches.labels(Contract.CHAIN.value).inc()
        if result.missing_opened or breach is not None:
            log.warning(
                "turn_stream_gap" if breach is None else "turn_chain_break",
                session_id=result.stream[0],
                producer_id=result.stream[1],
                sequence=result.sequence,
                missing=result.missing_opened,
                detail=None if breach is None else breach.detail,
                topic=where[0],
                partition=where[1],
                offset=where[2],
            )

    def _dead_letter(
        self,
        msg: Message,
        where: tuple[str, int, int],
        reason: DeadLetterReason,
        error: str,
        event_id: str | None = None,
    ) -> None:
        topic, partition, offset = where
        headers: list[tuple[str, str | bytes | None]] = [
            (k, v) for k, v in message_headers(msg) if not k.startswith(HEADER_PREFIX)
        ]
        headers += dead_letter_headers(
            reason=reason.value,
            error=error,
            topic=topic,
            partition=partition,
            offset=offset,
            stage=self.stage,
        )
        while True:
            try:
                self._dlq.produce(
                    self._dlq_topic,
                    msg.value(),
                    msg.key(),
                    headers=headers,
                    on_delivery=self._on_dlq_delivery,
                )
                break
            except BufferError:
                self._dlq.poll(0.1)  # the producer's queue is full: let it deliver first
        with self._lock:
            self._dlq_undelivered += 1
        self._dlq.poll(0)
        self.metrics.dead_letters.labels(reason.value).inc()
        self.metrics.messages.labels(MessageOutcome.DEAD_LETTERED.value).inc()
        log.warning(
            "turn_event_dead_lettered",
            reason=reason.value,
            error=error,
            event_id=event_id,
            topic=topic,
            partition=partition,
            offset=offset,
        )

    def _deliver(self, turns: list[ConsumedTurn]) -> bool:
        """Sink write, then dead letters acknowledged; retried until done or stopping."""
        attempt = 0
        written = not turns
        while True:
            try:
                if not written:
                    self._sink.write(turns)
                    written = True
                self._dlq.flush(1.0)
                with self._lock:
                    if self._dlq_undelivered == 0:
                        return True
            except Exception as exc:  # a sink may fail in any way; the batch is retried
                self.metrics.sink_failures.inc()
                log.error("sink_write_failed", error=repr(exc), turns=len(turns), attempt=attempt)
            if self._stopping.is_set():
                log.warning("batch_abandoned_at_shutdown", turns=len(turns), written=written)
                return False
            self._stopping.wait(_SINK_RETRY_BACKOFF_S[min(attempt, len(_SINK_RETRY_BACKOFF_S) - 1)])
            attempt += 1

    # -- callbacks -----------------------------------------------------------------
    def _on_dlq_delivery(self, err: KafkaError | None, msg: Message) -> None:
        # message.timeout.ms=0: librdkafka retries until the broker takes it,
        # so the only reports are success or a fatal/purge error.
        with self._lock:
            self._dlq_undelivered -= 1  # either way: a batch must not wait forever
        if err is not None:
            # A permanent refusal (e.g. too large with the headers): the original
            # stays where it was; say loudly which message could not be parked.
            self.metrics.dead_letter_failures.inc()
            log.critical(
                "dead_letter_delivery_failed", error=err.str(), code=err.name(),
                dlq_headers=read_dead_letter_headers(msg.headers()),
            )

    def _on_message_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        if error.fatal():
            raise KafkaException(error)
        log.warning("consumer_error", error=error.str(), code=error.name())

    def _on_error(self, error: KafkaError) -> None:
        log.warning("kafka_client_error", error=error.str(), code=error.name())

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        starts = []
        for tp in partitions:
            start = self._start_offsets.pop(tp.partition, None)
            if start is not None:
                tp.offset = start
            starts.append(tp)
        if any(tp.offset >= 0 for tp in starts):
            consumer.assign(starts)
        with self._lock:
            self._assigned.update(tp.partition for tp in partitions)
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
        with self._lock:
            for tp in partitions:
                self._assigned.discard(tp.partition)
                self._positions.pop(tp.partition, None)
                self._delivered_to.pop(tp.partition, None)
        # Sessions of a partition that moves on are tracked afresh on return.
        self._sequences.forget_partitions({tp.partition for tp in partitions})
        for tp in partitions:
            with contextlib.suppress(KeyError):  # no statistics arrived for it yet
                self.metrics.lag.remove(self.topic, str(tp.partition))

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
        partitions = stats.get("topics", {}).get(self.topic, {}).get("partitions", {})
        with self._lock:
            assigned = set(self._assigned)
        for name, partition in partitions.items():
            lag = partition.get("consumer_lag_stored", -1)
            if int(name) in assigned and lag >= 0:
                self.metrics.lag.labels(self.topic, name).set(lag)

    # -- shutdown -------------------------------------------------------------------
    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.settings.drain_timeout_s
        remaining = self._dlq.flush(max(0.0, deadline - time.monotonic()))
        if remaining:
            log.error("dead_letters_undelivered_at_shutdown", count=remaining)
        self._commit()
        self._consumer.close()  # leaves the group: the partitions move on at once
        try:
            self._sink.close()
        finally:
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
        log.info("consumer_stopped", group_id=self.settings.group_id)


class _BatchSizedGC:
    """The cyclic collector's first generation sized to hold a batch.

    A batch keeps its decoded records alive until the sink has them: with the
    default threshold (700 container objects) the collector runs a dozen
    times per batch, traversing and promoting records that reference counting
    frees a moment later, which costs several microseconds per message. Sized
    to a batch, it runs about once every few batches. The process's own
    threshold comes back when the last service in it stops.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved: tuple[int, int, int] = gc.get_threshold()

    def enter(self, batch_size: int) -> None:
        with self._lock:
            if self._users == 0:
                self._saved = gc.get_threshold()
            gen0, gen1, gen2 = gc.get_threshold()
            gc.set_threshold(max(gen0, batch_size * _GC_OBJECTS_PER_MESSAGE), gen1, gen2)
            self._users += 1

    def exit(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                gc.set_threshold(*self._saved)


_batch_sized_gc = _BatchSizedGC()


def message_headers(msg: Message) -> list[tuple[str, bytes | None]]:
    """A consumed message's headers: a list of (name, bytes) pairs (the stubs allow more)."""
    return cast(list[tuple[str, bytes | None]], msg.headers() or [])


def _position(msg: Message) -> tuple[str, int, int]:
    """Topic, partition, offset of a consumed message (only error events lack them)."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise KafkaException(f"consumed message without a position: {msg.error()}")
    return topic, partition, offset


def default_deserializer(settings: ServiceSettings) -> TurnEventDeserializer:
    """The shipped schemas, the schemas topic for the rest, and the registry if configured."""
    kafka = settings.kafka
    return TurnEventDeserializer(
        shipped_catalog(),
        registry=registry_client(kafka.schema_registry_url, kafka.schema_registry_options)
        if kafka.schema_registry_url
        else None,
        resolver=SchemaTopicResolver(kafka),
    )


def _handler_for(service: ConsumerService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] == "/metrics":
                self._reply(200, CONTENT_TYPE_LATEST, generate_latest(service._registry))
            elif self.path.split("?", 1)[0] == "/healthz":
                health = service.health()
                code = 200 if health["status"] == "ok" else 503
                self._reply(code, "application/json", json.dumps(health).encode())
            else:
                self._reply(404, "text/plain", b"not found: try /metrics or /healthz\n")

        def _reply(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every few seconds would drown the service's own log

    return Handler
