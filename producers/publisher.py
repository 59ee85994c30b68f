"""``TurnEventPublisher``: hands TurnEvents to Kafka without failing or delaying the turn.

The contract of ``publish(event)``:

* It returns the event id, or raises one of the project's documented errors,
  nothing else: ``EventRefusedError`` (the event was refused: spool full or its
  disk failing; counted, logged, on the refused metric) or
  ``SerializationError`` (the record does not fit its schema; raised before a
  sequence number is used up). Every ``PublishError`` is a ``TurnAuditError``.
* Each event is stamped before it is encoded (``turnaudit.identity.TurnStamper``):
  event id, this publisher's producer id, its position in the ordered stream
  (session, producer) and its predecessor's chain hash. Spooled bytes carry
  that identity, so the process that drains a spool never renumbers them.
* It never waits for the network: it encodes, then either hands the event to
  librdkafka's in-memory queue (``produce`` never blocks: a full queue raises
  at once and the event goes to the spool) or appends it to the on-disk spool
  (one ``write`` system call). The only lock it takes is held by other threads
  for counter updates and the same hand-over, never across I/O of theirs. No
  schema-registry call happens on this path: schema ids are obtained (and
  cached) when the publisher is built.
* Each accepted event is delivered, or spooled and delivered later, in order
  per session; an event the broker refuses for good (too large, not
  authorised) is counted as failed and kept in ``<spool_dir>/rejected``.
* ``stats()`` is consistent at every moment:
  ``published + inherited == delivered + in_flight + spooled + refused + failed``
  (``inherited``: events a previous publisher left in the spool).

Durability: events in librdkafka's queue are in memory (a killed process loses
them); spooled events are on disk. ``close()`` flushes, moves what the broker
did not acknowledge into the spool (delivered by the next publisher on the same
folder) and returns a report; it never raises for delivery problems.

A background thread serves librdkafka's callbacks, notices the broker is back,
waits until the in-memory queue is empty, then drains the spool in order. It
survives any error (logged, counted, retried after a pause) and is restarted
by ``publish()`` should it ever stop. After ``close()``, ``publish()`` still
keeps its promise: events go to the spool, for the next publisher.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from prometheus_client import CollectorRegistry

from turnaudit.errors import (
    ConfigurationError,
    EventRefusedError,
    PublishError,
    RegistryUnavailableError,
    SerializationError,
    SpoolFullError,
    SpoolWriteError,
)
from turnaudit.identity import TurnStamper
from turnaudit.kafka.dead_letters import dead_letter_headers
from turnaudit.producers.metrics import PublisherMetrics
from turnaudit.producers.spool import DiskSpool, SpooledMessage, SpoolRecord
from turnaudit.serialization.registry import ensure_compatibility
from turnaudit.serialization.schemas import SchemaCatalog, WriterSchema, shipped_catalog
from turnaudit.serialization.wire import (
    ConfluentIdSerializer,
    SingleObjectSerializer,
    registry_client,
)
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.publisher")

# Producer options the delivery guarantees rest on; a user may not override them.
_GUARANTEES: dict[str, object] = {
    "enable.idempotence": True,
    "acks": "all",
    "message.timeout.ms": 0,  # retry until delivered or purged into the spool at close
    # Every delivery is reported: deliveries are counted from the reports, on
    # the publisher's own thread, never from the client's queue length.
    "delivery.report.only.error": False,
}
_DEFAULTS: dict[str, object] = {
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 262_144,
    "reconnect.backoff.max.ms": 1000,
}
_DRAIN_BATCH = 500
_WORKER_PAUSE_S = 0.5  # after an unexpected error in the background thread
_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """Where every event handed to ``publish()`` is now.

    ``published + inherited == delivered + in_flight + spooled + refused + failed``.
    """

    published: int  # publish() calls that got an event id and sequence number
    delivered: int  # acknowledged by the broker (from delivery reports)
    failed: int  # refused by the broker for good (kept in <spool_dir>/rejected)
    spooled: int  # on disk, waiting for the broker
    in_flight: int  # in librdkafka's queue, not yet acknowledged
    refused: int = 0  # not accepted by publish(): spool full or its disk failing
    inherited: int = 0  # found in the spool when the publisher opened it
    dead_lettered: int = 0  # sent to the dead-letter topic by dead_letter()
    spool_bytes: int = 0
    oldest_spooled_age_s: float = 0.0
    worker_errors: int = 0  # unexpected errors the background thread survived

    @property
    def balanced(self) -> bool:
        counts = (self.published, self.delivered, self.failed, self.spooled, self.in_flight,
                  self.refused, self.inherited)
        return min(counts) >= 0 and self.published + self.inherited == (
            self.delivered + self.in_flight + self.spooled + self.refused + self.failed
        )


@dataclass(frozen=True, slots=True)
class CloseReport:
    delivered: int
    undelivered: int  # left in the spool for the next publisher
    failed: int  # refused by the broker for good; kept in <spool_dir>/rejected
    spool_dir: str
    refused: int = 0  # not accepted by publish(): spool full or its disk failing
    lost: int = 0  # could be neither delivered nor put back on disk at close

    @property
    def ok(self) -> bool:
        return not (self.undelivered or self.failed or self.refused or self.lost)

    def describe(self) -> str:
        return (
            f"{self.delivered} delivered, {self.undelivered} waiting in the spool "
            f"({self.spool_dir}), {self.refused} refused, {self.failed} failed, {self.lost} lost"
        )


class _DrainBatch:
    """Spooled records handed to librdkafka; committed once all are reported."""

    def __init__(self, records: list[SpoolRecord]) -> None:
        self.records = records
        self.produced = 0
        self.reported = [False] * len(records)
        self.outstanding = 0

    def done_prefix(self) -> int:
        """How many leading records are dealt with (delivered, or set aside)."""
        for i, done in enumerate(self.reported):
            if not done:
                return i
        return len(self.reported)


class TurnEventPublisher:
    """Publishes TurnEvent records (dicts in the writer schema's shape)."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        spool_dir: Path,
        spool_max_bytes: int = 1 << 30,
        catalog: SchemaCatalog | None = None,
        producer_options: dict[str, object] | None = None,
        id_factory: Callable[[], str] | None = None,
        probe_interval: float = 1.0,
        registry: CollectorRegistry | None = None,
        schema_registry: SchemaRegistryClient | None = None,
        producer_id: str | None = None,
    ) -> None:
        catalog = catalog or shipped_catalog()
        self.topic = settings.topics.turn_events
        self._dlq_topic = settings.topics.dlq
        clash = set(_GUARANTEES) & set(producer_options or {})
        if clash:
            raise ConfigurationError(f"producer options {sorted(clash)} are fixed by the publisher")
        self._spool = _open_spool(spool_dir, spool_max_bytes)
        # Messages the broker refused for good, for an operator to inspect.
        self._rejected = _open_spool(spool_dir / "rejected", spool_max_bytes)
        # Schema ids first: a registry that is away now fails here, before any
        # turn; afterwards the turn's path never calls it.
        self._serializers = self._build_serializers(settings, catalog, schema_registry)
        self.metrics = PublisherMetrics(registry)
        config = settings.client_config(
            _DEFAULTS,
            **{**(producer_options or {}), **_GUARANTEES},
            error_cb=self._on_error,
            # One producer-wide callback: no per-message callback object to carry.
            on_delivery=self._on_delivery,
        )
        try:
            self._producer = Producer(config)
            # Schema announcements are not events: their own producer keeps them
            # out of the delivery counts and the spool (every publisher re-announces).
            self._schema_producer = Producer(settings.client_config())
        except KafkaException as exc:
            raise ConfigurationError(f"Kafka producer settings: {exc.args[0].str()}") from None
        if settings.schema_registry_url is None and schema_registry is None:
            for schema in catalog.versions:
                self._announce_schema(settings.topics.schemas, schema)
        # Turn identity, assigned before encoding: spooled bytes are stamped already,
        # so the process that drains a spool never renumbers them.
        self._stamper = TurnStamper(producer_id=producer_id, id_factory=id_factory)
        self.producer_id = self._stamper.producer_id
        self._handback: list[SpooledMessage] = []
        self._lock = threading.Lock()
        # Counters (under _lock): where every event is, see PublisherStats.
        self._published = self._failed = self._refused = self._dead_lettered = 0
        # Events handed to librdkafka, and what became of them. _delivered has
        # one writer (the thread serving delivery reports) and is read once per
        # stats() snapshot; in flight = produced - delivered - failed - purged.
        self._produced = self._delivered = self._purged = 0
        self._dlq_in_flight = 0
        self._inherited = self._spooled = self._spool.pending_by_topic[self.topic]
        self._spooled_total = 0
        self._worker_errors = 0
        self._refused_by_reason: dict[str, int] = {}
        self._lost = 0
        # Route new events to the spool while it holds anything: order per session.
        self._spooling = len(self._spool) > 0
        self._broker_down = False
        self._probe_interval = probe_interval
        self._batch: _DrainBatch | None = None
        self._closing = threading.Event()
        self._closed = False
        self.metrics.attach(self)
        self._worker = self._start_worker()

    # -- the runtime's call --------------------------------------------------
    def publish(self, event: dict[str, Any]) -> str:
        """Stamp the turn's identity (event id, producer id, stream position,
        predecessor hash), encode it, hand it to Kafka
        or the spool, and return the event id. See the module docstring for the
        contract; raises ``EventRefusedError`` or ``SerializationError`` only."""
        session = event["session_id"]
        key = session.encode()
        refusal: EventRefusedError | None = None
        # One lock from sequence number to hand-over: two threads publishing for
        # one session cannot swap their events' order.
        with self._lock:
            # -- identity: event id, producer id, stream position, chain hash ---
            event_id = self._stamper.stamp(event)
            value = self._serialize(event)  # raises before a position is used up
            self._stamper.commit(event, value)
            sequence = event["sequence"]
            # -- hand-over ------------------------------------------------------
            self._published += 1
            if not self._spooling:
                try:
                    self._producer.produce(self.topic, value, key)
                    self._produced += 1
                    return event_id
                except BufferError:
                    self._spooling = True  # librdkafka's queue is full: the spool takes it
                except KafkaException as exc:
                    log.warning("produce_failed_spooling", error=str(exc))
                    self._spooling = True
            if not self._worker.is_alive() and not self._closing.is_set():
                self._worker = self._start_worker()  # it drains the spool: never without it
            try:
                self._spool.append(self.topic, key, value)
                self._spooled += 1
                self._spooled_total += 1
            except (SpoolFullError, SpoolWriteError) as exc:
                self._refused += 1
                reason = "spool_full" if isinstance(exc, SpoolFullError) else "disk_error"
                self._refused_by_reason[reason] = self._refused_by_reason.get(reason, 0) + 1
                refusal = EventRefusedError(
                    f"event {event_id} refused: {exc}", event_id=event_id, sequence=sequence,
                    reason=reason,
                )
        if refusal is not None:
            log.error("turn_event_refused", event_id=event_id, session_id=session,
                      sequence=sequence, reason=refusal.reason, error=str(refusal))
            raise refusal
        return event_id

    # -- callbacks (run inside poll, on whichever thread polls) ---------------
    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        # Turn events only (dead letters carry their own callback); this runs
        # once per event on the publisher's thread, so it stays this small.
        if err is None:
            self._delivered += 1
            latency = msg.latency()
            if latency is not None:
                self.metrics.delivery_latency.observe(latency)
            return
        self._account(err, msg, handback=True)

    def _on_dead_letter(self, err: KafkaError | None, msg: Message) -> None:
        self._account(err, msg, handback=True)

    def _on_drained(self, batch: _DrainBatch, index: int, err: KafkaError | None,
                    msg: Message) -> None:
        purged = self._account(err, msg, handback=False)
        batch.outstanding -= 1
        batch.reported[index] = not purged

    def _account(self, err: KafkaError | None, msg: Message, *, handback: bool) -> bool:
        """Count one delivery report; True when the message was purged at close."""
        is_event = msg.topic() == self.topic
        if err is None:
            if is_event:
                self._delivered += 1
                latency = msg.latency()
                if latency is not None:
                    self.metrics.delivery_latency.observe(latency)
            else:
                with self._lock:
                    self._dlq_in_flight -= 1
            return False
        kept = SpooledMessage(
            msg.topic() or self.topic, msg.key() or b"", msg.value() or b"",
            _bytes_headers(msg.headers()),
        )
        if err.code() in _PURGED:
            # Purged at close(): back to the spool (a drained one never left it).
            # An in-flight one may also have reached the broker: a duplicate
            # with the same event id.
            with self._lock:
                if is_event:
                    self._purged += 1
                    self._spooled += 1
                else:
                    self._dlq_in_flight -= 1
                if handback:
                    self._handback.append(kept)
            return True
        # With message.timeout.ms=0 only a permanent error gets here (too large,
        # not authorised, ...): retrying cannot help, so it is set aside, kept
        # on disk and reported, never dropped.
        with self._lock:
            if is_event:
                self._failed += 1
            else:
                self._dlq_in_flight -= 1
        log.error("delivery_failed", error=err.str(), code=err.name(), topic=msg.topic())
        try:
            self._rejected.append(kept.topic, kept.key, kept.value, kept.headers)
        except PublishError as exc:
            log.critical("rejected_event_not_kept", spool_dir=str(self._rejected.directory),
                         error=str(exc))
        return False

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            # The idempotent producer cannot go on (librdkafka says so): events
            # already queued are reported failed and kept in rejected/.
            log.critical("producer_fatal_error", error=err.str(), code=err.name())
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if not self._broker_down:
                log.warning("broker_unreachable", error=err.str())
            self._broker_down = True
            self._spooling = True

    # -- background: poll, notice recovery, drain the spool -------------------
    def _start_worker(self) -> threading.Thread:
        worker = threading.Thread(target=self._run, name="turnaudit-publisher", daemon=True)
        worker.start()
        return worker

    def _run(self) -> None:
        last_probe = 0.0
        while not self._closing.is_set():
            try:
                self._producer.poll(0.05)
                self._schema_producer.poll(0)
                if not self._spooling:
                    continue
                now = time.monotonic()
                if self._broker_down and now - last_probe >= self._probe_interval:
                    last_probe = now
                    self._broker_down = not self._broker_reachable()
                    if not self._broker_down:
                        log.info("broker_reachable_again")
                if not self._broker_down and len(self._producer) == 0:
                    self._drain_once()
            except Exception as exc:  # the thread must outlive any error
                self._worker_errors += 1
                log.error("publisher_worker_error", error=repr(exc))
                self._closing.wait(_WORKER_PAUSE_S)

    def _broker_reachable(self) -> bool:
        try:
            self._producer.list_topics(self.topic, timeout=1.0)
        except KafkaException:
            return False
        return True

    def _drain_once(self) -> None:
        if self._batch is not None:  # left by an error: finish it before reading more
            while self._batch.outstanding > 0 and not self._closing.is_set():
                self._producer.poll(0.05)
            self._settle_batch()
        records = self._spool.read(limit=_DRAIN_BATCH)
        if not records:
            self._stop_spooling_if_empty()
            return
        batch = self._batch = _DrainBatch(records)
        for index, record in enumerate(records):
            message = record.message
            while not self._closing.is_set():
                try:
                    with self._lock:
                        self._producer.produce(
                            message.topic, message.value, message.key,
                            headers=list(message.headers or ()),
                            on_delivery=functools.partial(self._on_drained, batch, index),
                        )
                        batch.outstanding += 1
                        batch.produced += 1
                        if message.topic == self.topic:
                            self._spooled -= 1
                            self._produced += 1
                        else:
                            self._dlq_in_flight += 1
                    break
                except BufferError:
                    self._producer.poll(0.05)
                except KafkaException as exc:
                    log.warning("drain_produce_failed", error=str(exc))
                    self._closing.wait(_WORKER_PAUSE_S)
            if self._closing.is_set():
                return  # close() settles the batch
        # Every record is reported before the batch leaves the spool: a second
        # outage now leaves it in librdkafka's queue, retried, never repeated.
        while batch.outstanding > 0 and not self._closing.is_set():
            self._producer.poll(0.05)
        if not self._closing.is_set():
            self._settle_batch()
            self._stop_spooling_if_empty()

    def _settle_batch(self) -> None:
        """Take the batch's leading dealt-with records out of the spool."""
        batch, self._batch = self._batch, None
        if batch is None:
            return
        done = batch.done_prefix()
        if done:
            self._spool.commit(batch.records[done - 1].end, done)

    def _stop_spooling_if_empty(self) -> None:
        # Under the lock publish() appends with, so no event is left behind.
        with self._lock:
            if len(self._spool) == 0:
                self._spooling = False

    # -- reading the state -----------------------------------------------------
    def stats(self) -> PublisherStats:
        with self._lock:
            oldest = self._spool.oldest_appended_at
            delivered = self._delivered  # read once: it moves without the lock
            return PublisherStats(
                published=self._published,
                delivered=delivered,
                failed=self._failed,
                spooled=self._spooled,
                in_flight=self._produced - delivered - self._failed - self._purged,
                refused=self._refused,
                inherited=self._inherited,
                dead_lettered=self._dead_lettered,
                spool_bytes=self._spool.size_bytes,
                oldest_spooled_age_s=0.0 if oldest is None else max(0.0, time.time() - oldest),
                worker_errors=self._worker_errors,
            )

    def refused_by_reason(self) -> dict[str, int]:
        with self._lock:
            return dict(self._refused_by_reason)

    @property
    def spooled_total(self) -> int:
        """Events that went to the spool since the publisher started."""
        return self._spooled_total

    # -- lifecycle -----------------------------------------------------------
    def close(self, timeout: float = 30.0) -> CloseReport:
        """Flush; whatever the broker did not take stays in the spool, reported
        here. Never raises for delivery problems; calling it twice is harmless."""
        if self._closed:
            return self._report()
        deadline = time.monotonic() + timeout
        while self._spooling and time.monotonic() < deadline and self._worker.is_alive():
            time.sleep(0.05)  # let the worker drain the spool if the broker comes back
        self._closing.set()
        self._worker.join()
        remaining = self._producer.flush(max(0.0, deadline - time.monotonic()))
        if remaining:
            self._producer.purge(in_queue=True, in_flight=True, blocking=True)
        self._producer.flush(0)  # serves the purge reports
        lost = 0
        try:
            self._settle_batch()
            # The client's queue is older than anything spooled: it goes in front.
            self._spool.requeue_front(self._handback)
        except (PublishError, OSError) as exc:
            with self._lock:
                lost = sum(m.topic == self.topic for m in self._handback)
                self._spooled -= lost
                self._failed += lost
            log.critical("undelivered_events_not_kept", events=lost, error=str(exc))
        self._handback = []
        self._schema_producer.flush(min(5.0, max(0.0, deadline - time.monotonic())))
        self._spool.close()
        self._rejected.close()
        with self._lock:
            # A publish() after close() goes to the spool, for the next publisher.
            self._spooling = True
            self._closed = True
        self._lost = lost
        report = self._report()
        if report.ok:
            log.info("publisher_closed", delivered=report.delivered)
        else:
            log.error("publisher_closed_with_undelivered", report=report.describe())
        return report

    def _report(self) -> CloseReport:
        s = self.stats()
        return CloseReport(
            delivered=s.delivered,
            undelivered=len(self._spool),
            failed=s.failed,
            spool_dir=str(self._spool.directory),
            refused=s.refused,
            lost=self._lost,
        )

    def dead_letter(self, event: dict[str, Any], reason: str, error: str) -> None:
        """Send an event the runtime built but must not publish as valid to the DLQ.

        It keeps an event id but takes no sequence number, so the session's
        sequence shows no gap for it. Same guarantees as ``publish()``: raises
        ``EventRefusedError`` when it can be neither sent nor spooled.
        """
        event["event_id"] = event_id = self._stamper.new_event_id()
        event["sequence"] = -1
        headers = dead_letter_headers(
            reason=reason, error=error, topic=self.topic, partition=None, offset=None,
            stage="producer",
        )
        value, key = self._serialize(event), event["session_id"].encode()
        with self._lock:
            self._dead_lettered += 1
            if not self._spooling:
                try:
                    self._producer.produce(self._dlq_topic, value, key, headers=headers,
                                           on_delivery=self._on_dead_letter)
                    self._dlq_in_flight += 1
                    return
                except (BufferError, KafkaException):
                    self._spooling = True
            try:
                self._spool.append(self._dlq_topic, key, value, _bytes_headers(headers))
                return
            except (SpoolFullError, SpoolWriteError) as exc:
                refusal = EventRefusedError(
                    f"dead letter {event_id} refused: {exc}", event_id=event_id, sequence=-1,
                    reason="spool_full" if isinstance(exc, SpoolFullError) else "disk_error",
                )
        # Not an event of the stream (no sequence number): logged, not counted as refused.
        log.critical("dead_letter_refused", event_id=event_id, reason=refusal.reason,
                     error=str(refusal))
        raise refusal

    # -- encoding --------------------------------------------------------------
    def _build_serializers(
        self,
        settings: KafkaSettings,
        catalog: SchemaCatalog,
        schema_registry: SchemaRegistryClient | None,
    ) -> dict[int, Callable[[dict[str, Any]], bytes]]:
        # One serializer per shipped version: an event is written with the
        # version its bundle names, so a runtime can move from v1 to v2 gradually.
        url = settings.schema_registry_url
        registry = schema_registry or (
            registry_client(url, settings.schema_registry_options) if url else None
        )
        if registry is None:
            return {s.version: SingleObjectSerializer(s) for s in catalog.versions}
        subject = f"{self.topic}-value"  # TopicNameStrategy, as confluent-kafka's own
        out: dict[int, Callable[[dict[str, Any]], bytes]] = {}
        auto_register = settings.schema_registry_auto_register
        for schema in catalog.versions:
            avro = Schema(schema.schema_json, "AVRO")
            schema_id: int | None
            try:
                if auto_register:
                    # Once, before the subject's first registration; the client's
                    # in-process mock:// registry keeps no compatibility levels.
                    if not out and not (url or "").startswith("mock://"):
                        ensure_compatibility(registry, subject)
                    schema_id = registry.register_schema(subject, avro)
                else:  # registered beforehand by the operator: only looked up
                    schema_id = registry.lookup_schema(subject, avro).schema_id
            except Exception as exc:  # the registry client raises many unrelated types
                raise RegistryUnavailableError(
                    f"schema registry {url or 'client'} did not "
                    f"{'register' if auto_register else 'find'} TurnEvent "
                    f"v{schema.version} under {subject}: {_one_line(exc)}"
                ) from exc
            if schema_id is None:
                raise RegistryUnavailableError(
                    f"schema registry {url or 'client'} has no id for TurnEvent "
                    f"v{schema.version} under {subject}"
                )
            out[schema.version] = ConfluentIdSerializer(schema, schema_id)
        return out

    def _serialize(self, event: dict[str, Any]) -> bytes:
        version = event["verdicts"]["schema_version"]
        try:
            serializer = self._serializers[version]
        except KeyError:
            raise SerializationError(f"no shipped TurnEvent schema version {version}") from None
        return serializer(event)

    def _announce_schema(self, schemas_topic: str, schema: WriterSchema) -> None:
        """Put a writer schema on the compacted schemas topic, keyed by fingerprint."""
        self._schema_producer.produce(
            schemas_topic, schema.schema_json.encode(), schema.fingerprint_hex.encode()
        )
        self._schema_producer.poll(0)


def _open_spool(directory: Path, max_bytes: int) -> DiskSpool:
    """The spool, or one line saying why its folder cannot be used."""
    try:
        spool = DiskSpool(directory, max_bytes=max_bytes)
        probe = directory / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigurationError(
            f"spool directory {directory} is not usable ({exc.strerror or exc}): "
            "choose a writable folder (--spool-dir)"
        ) from None
    return spool


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _bytes_headers(
    headers: Sequence[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None,
) -> list[tuple[str, bytes]] | None:
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v if isinstance(v, bytes) else (v or "").encode()) for k, v in pairs]


def raise_if_undelivered(report: CloseReport) -> None:
    if not report.ok:
        raise PublishError(report.describe())
