"""``TurnEventPublisher``: hands TurnEvents to Kafka without blocking the turn.

* Idempotent producer with ``acks=all``; key = session id, so a session's
  events stay in order on one partition.
* ``publish()`` stamps the turn's identity (``turnaudit.identity.TurnStamper``:
  event id, this publisher's producer id, the position in the ordered stream
  (session, producer) and its predecessor's chain hash), encodes, and calls
  ``produce`` + ``poll(0)``: it never waits for the broker.
* librdkafka retries forever (``message.timeout.ms=0``) while its bounded
  in-memory queue has room. When every broker is down, or that queue is full,
  events go to a bounded on-disk spool instead. A background thread notices the
  broker is back, waits for the in-memory queue to empty, then drains the
  spool in order, so per-session order holds across an outage.
* ``close()`` flushes, moves whatever the broker did not acknowledge into the
  spool (delivered next time a publisher opens it) and reports the counts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from turnaudit.errors import ConfigurationError, PublishError, SerializationError, SpoolFullError
from turnaudit.identity import TurnStamper
from turnaudit.kafka.dead_letters import dead_letter_headers
from turnaudit.producers.spool import DiskSpool, SpooledMessage
from turnaudit.serialization.schemas import SchemaCatalog, WriterSchema, shipped_catalog
from turnaudit.serialization.wire import (
    ConfluentSerializer,
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
    # Successes are counted from the queue length; only failures need a
    # callback, which keeps a Python call per event off the hot path.
    "delivery.report.only.error": True,
}
_DEFAULTS: dict[str, object] = {
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 262_144,
    "reconnect.backoff.max.ms": 1000,
    "log_level": 3,
}


@dataclass(frozen=True, slots=True)
class PublisherStats:
    published: int  # accepted by publish()
    delivered: int  # acknowledged by the broker
    failed: int  # delivery reports with a permanent error (kept in the spool)
    spooled: int  # events currently in the spool
    in_flight: int  # events in librdkafka's queue, not yet acknowledged


@dataclass(frozen=True, slots=True)
class CloseReport:
    delivered: int
    undelivered: int  # left in the spool for the next publisher
    failed: int  # refused by the broker for good; kept in <spool_dir>/rejected
    spool_dir: str
    refused: int = 0  # not accepted by publish(): the spool was full

    @property
    def ok(self) -> bool:
        return self.undelivered == 0 and self.failed == 0 and self.refused == 0


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
        producer_id: str | None = None,
    ) -> None:
        catalog = catalog or shipped_catalog()
        self.topic = settings.topics.turn_events
        self._dlq_topic = settings.topics.dlq
        clash = set(_GUARANTEES) & set(producer_options or {})
        if clash:
            raise ConfigurationError(f"producer options {sorted(clash)} are fixed by the publisher")
        config = settings.client_config(
            _DEFAULTS,
            **{**(producer_options or {}), **_GUARANTEES},
            error_cb=self._on_error,
            # One producer-wide callback: no per-message callback object to carry.
            on_delivery=self._on_delivery,
        )
        self._producer = Producer(config)
        # Schema announcements are not events: their own producer keeps them out
        # of the delivery counts and the spool (every publisher re-announces).
        self._schema_producer = Producer(settings.client_config(**{"log_level": 3}))
        # One serializer per shipped version: an event is written with the
        # version its bundle names, so a runtime can move from v1 to v2 gradually.
        self._serializers: dict[int, Callable[[dict[str, Any]], bytes]] = {}
        registry = (
            registry_client(settings.schema_registry_url, settings.schema_registry_options)
            if settings.schema_registry_url
            else None
        )
        for schema in catalog.versions:
            if registry is not None:
                self._serializers[schema.version] = ConfluentSerializer(
                    schema, registry, auto_register=settings.schema_registry_auto_register
                ).bind(self.topic)
            else:
                self._serializers[schema.version] = SingleObjectSerializer(schema)
                self._announce_schema(settings.topics.schemas, schema)
        # Turn identity, assigned before encoding: spooled bytes are stamped already,
        # so the process that drains a spool never renumbers them.
        self._stamper = TurnStamper(producer_id=producer_id, id_factory=id_factory)
        self.producer_id = self._stamper.producer_id
        self._spool = DiskSpool(spool_dir, max_bytes=spool_max_bytes)
        # Messages the broker refused for good, for an operator to inspect.
        self._rejected = DiskSpool(spool_dir / "rejected", max_bytes=spool_max_bytes)
        self._handback: list[SpooledMessage] = []
        # Route new events to the spool while it holds anything: order per session.
        self._spooling = len(self._spool) > 0
        self._broker_down = False
        self._lock = threading.Lock()
        self._produced = self._failed = self._purged = self._refused = 0
        self._probe_interval = probe_interval
        self._closing = threading.Event()
        self._worker = threading.Thread(target=self._run, name="turnaudit-publisher", daemon=True)
        self._worker.start()

    # -- the runtime's call --------------------------------------------------
    def publish(self, event: dict[str, Any]) -> str:
        """Stamp the turn's identity, encode, hand to Kafka or the spool; return the event id."""
        key = event["session_id"].encode()
        # One lock from stream position to hand-over: two threads publishing for
        # one session cannot swap their events' order.
        with self._lock:
            event_id = self._stamper.stamp(event)
            value = self._serialize(event)  # raises before a position is used up
            self._stamper.commit(event, value)
            if not self._spooling:
                try:
                    self._producer.produce(self.topic, value, key)
                    self._produced += 1
                except BufferError:
                    self._spooling = True  # librdkafka's queue is full: the spool takes it
            if self._spooling:
                try:
                    self._spool.append(self.topic, key, value)
                except SpoolFullError:
                    # Refused loudly: the caller hears it, close() reports it, and
                    # consumers see the used-up sequence number as a gap.
                    self._refused += 1
                    raise
        # No poll(0) here: the publisher's own thread polls continuously and
        # serves the delivery callbacks, so the turn does not pay for it.
        return event_id

    # -- callbacks (run inside poll, on whichever thread polls) ---------------
    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:  # not reported with delivery.report.only.error; kept for safety
            return
        kept = SpooledMessage(
            msg.topic() or self.topic, msg.key() or b"", msg.value() or b"",
            _bytes_headers(msg.headers()),
        )
        if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            # Purged at close(): handed back to the spool ahead of what it holds.
            # An in-flight one may also have reached the broker: a duplicate
            # with the same event id.
            self._purged += 1
            self._handback.append(kept)
            return
        # With message.timeout.ms=0 only a permanent error gets here (too large,
        # not authorized, ...): retrying cannot help, so it is set aside, kept
        # on disk and reported, never dropped.
        with self._lock:
            self._failed += 1
        log.error("delivery_failed", error=err.str(), code=err.name(), topic=msg.topic())
        try:
            self._rejected.append(kept.topic, kept.key, kept.value, kept.headers)
        except SpoolFullError:
            log.critical("rejected_event_not_kept", spool_dir=str(self._rejected.directory))

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._broker_down = True
            self._spooling = True
            log.warning("broker_unreachable", error=err.str())

    # -- background: poll, notice recovery, drain the spool -------------------
    def _run(self) -> None:
        last_probe = 0.0
        while not self._closing.is_set():
            self._producer.poll(0.05)
            if not self._spooling:
                continue
            now = time.monotonic()
            if self._broker_down and now - last_probe >= self._probe_interval:
                last_probe = now
                self._broker_down = not self._broker_reachable()
            if not self._broker_down and len(self._producer) == 0:
                self._drain_once()

    def _broker_reachable(self) -> bool:
        try:
            self._producer.list_topics(self.topic, timeout=1.0)
        except KafkaException:
            return False
        return True

    def _drain_once(self) -> None:
        batch, position = self._spool.read_batch(limit=5000)
        if not batch:
            self._stop_spooling_if_empty()
            return
        for message in batch:
            while True:
                try:
                    self._producer.produce(
                        message.topic, message.value, message.key,
                        headers=list(message.headers or ()),
                    )
                    self._produced += 1
                    break
                except BufferError:
                    self._producer.poll(0.05)
        # Wait for this batch before taking it out of the spool: a second outage
        # now leaves it there (redelivered later, same event ids).
        remaining = self._producer.flush(30.0)
        if remaining == 0 and not self._broker_down:
            self._spool.commit(position, len(batch))
        self._stop_spooling_if_empty()

    def _stop_spooling_if_empty(self) -> None:
        # Under the lock publish() appends with, so no event is left behind.
        with self._lock:
            if len(self._spool) == 0:
                self._spooling = False

    # -- lifecycle -----------------------------------------------------------
    @property
    def _delivered(self) -> int:
        # Everything produced that is neither still queued nor reported failed
        # (purged ones are reported as failed-and-spooled, see _on_delivery).
        return self._produced - len(self._producer) - self._failed - self._purged

    def stats(self) -> PublisherStats:
        with self._lock:
            published = self._stamper.published
        return PublisherStats(
            published, self._delivered, self._failed, len(self._spool), len(self._producer)
        )

    def close(self, timeout: float = 30.0) -> CloseReport:
        """Flush; whatever the broker did not take stays in the spool, reported here."""
        deadline = time.monotonic() + timeout
        while self._spooling and time.monotonic() < deadline:
            time.sleep(0.05)  # let the worker drain the spool if the broker comes back
        self._closing.set()
        self._worker.join()
        remaining = self._producer.flush(max(0.0, deadline - time.monotonic()))
        if remaining:
            self._producer.purge(in_queue=True, in_flight=True, blocking=True)
            self._producer.poll(0)
        self._producer.flush(0)
        # The client's queue is older than anything spooled: it goes in front.
        self._spool.requeue_front(self._handback)
        self._handback = []
        self._schema_producer.flush(min(5.0, max(0.0, deadline - time.monotonic())))
        self._spool.close()
        delivered = self._delivered
        self._rejected.close()
        report = CloseReport(
            delivered, len(self._spool), self._failed, str(self._spool.directory), self._refused
        )
        if report.ok:
            log.info("publisher_closed", delivered=report.delivered)
        else:
            log.error(
                "publisher_closed_with_undelivered",
                delivered=report.delivered,
                undelivered=report.undelivered,
                failed=report.failed,
                refused=report.refused,
                spool_dir=report.spool_dir,
            )
        return report

    def dead_letter(self, event: dict[str, Any], reason: str, error: str) -> None:
        """Send an event the runtime built but must not publish as valid to the DLQ.

        It keeps an event id but takes no sequence number, so the session's
        sequence shows no gap for it.
        """
        event["event_id"] = self._stamper.new_event_id()
        event["sequence"] = -1
        headers = dead_letter_headers(
            reason=reason, error=error, topic=self.topic, partition=None, offset=None,
            stage="producer",
        )
        value, key = self._serialize(event), event["session_id"].encode()
        with self._lock:
            if not self._spooling:
                try:
                    self._producer.produce(self._dlq_topic, value, key, headers=headers)
                    self._produced += 1
                except BufferError:
                    self._spooling = True
            if self._spooling:
                self._spool.append(self._dlq_topic, key, value, _bytes_headers(headers))
        self._producer.poll(0)

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


def _bytes_headers(
    headers: Sequence[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None,
) -> list[tuple[str, bytes]] | None:
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v if isinstance(v, bytes) else (v or "").encode()) for k, v in pairs]


def raise_if_undelivered(report: CloseReport) -> None:
    if not report.ok:
        raise PublishError(
            f"{report.undelivered} events undelivered (kept in {report.spool_dir}), "
            f"{report.failed} delivery failures"
        )
