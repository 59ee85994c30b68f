"""``TurnEventPublisher``: hands TurnEvents to Kafka without failing or delaying the turn.

``publish(event)`` stamps a copy of the event with the turn's identity (event id, producer
id, stream position, predecessor hash: ``turnaudit.identity.TurnStamper``), seals its surfaces
when a surface keyring is set (docs/privacy.md), encodes it, and hands it to librdkafka's queue
or the on-disk spool without waiting for the network; it returns the event id or raises
``EventRefusedError`` / ``SerializationError`` only. ``stats()`` always balances
(``published + inherited == delivered + in_flight + spooled + refused + failed``); ``close()``
never raises for delivery problems. Journal mode, the age bound on memory, signed checkpoints
and the failover thread: the whole contract is in docs/publisher.md.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from prometheus_client import CollectorRegistry

from turnaudit.errors import ConfigurationError, EventRefusedError, SpoolFullError, SpoolWriteError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.identity import TurnStamper
from turnaudit.kafka.producer import (
    DeliveredMessage,
    DeliveryError,
    KafkaProducer,
    ProduceError,
    QueueFullError,
    is_permanent,
    is_purged,
)
from turnaudit.kafka.schema_topic import announce_schema, announced_schemas
from turnaudit.kafka.schema_writers import RegistryClient, turn_event_writers
from turnaudit.producers.accounting import CloseReport, Ledger, PublisherStats
from turnaudit.producers.checkpointer import Checkpointer
from turnaudit.producers.dead_letter_sending import DeadLetterSending
from turnaudit.producers.failover import Failover
from turnaudit.producers.heads import HeadsFile
from turnaudit.producers.journal import JournalMode, journal_from_env
from turnaudit.producers.journal_records import JournalEntry
from turnaudit.producers.key_records import KeyRecordRoute, KeyRecordTurn
from turnaudit.producers.metrics import PublisherMetrics
from turnaudit.producers.producer_config import (
    DEFAULT_MAX_UNACKED_S,
    GUARANTEES,
    PRODUCER_DEFAULTS,
    env_seconds,
)
from turnaudit.producers.spool import SpooledMessage
from turnaudit.sealing import SurfaceKeyProvider
from turnaudit.sealing.key_topic import PublisherSealing
from turnaudit.serialization.schemas import SchemaCatalog, shipped_catalog
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings

__all__ = ["CloseReport", "PublisherStats", "TurnEventPublisher"]

log = structlog.get_logger("turnaudit.publisher")


@dataclass(frozen=True, slots=True)
class _Turn:
    """What the hand-over needs of a stamped turn besides its bytes."""

    event_id: str
    session: str
    sequence: int
    occurred_at: int
    data_key: bytes | None  # the data key it is sealed under (None: not sealed)


class TurnEventPublisher(DeadLetterSending):
    """Publishes TurnEvents built by the adapter (``OutgoingTurnEvent``)."""

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
        schema_registry: RegistryClient | None = None,
        producer_id: str | None = None,
        max_unacked_s: float | None = None,
        head_interval_s: float | None = None,
        liveness_interval_s: float | None = None,
        checkpoints: CheckpointSettings | None = None,
        journal: bool | None = None,
        surface_keys: SurfaceKeyProvider | Literal["env"] | None = "env",
    ) -> None:
        catalog = catalog or shipped_catalog()
        if journal is None:
            journal = journal_from_env()
        if checkpoints is None:  # TURNAUDIT_SIGNING_KEY_FILE &c.: a bad key fails first
            checkpoints = CheckpointSettings.from_env()
        if max_unacked_s is None:
            max_unacked_s = env_seconds("TURNAUDIT_MAX_UNACKED_S", DEFAULT_MAX_UNACKED_S)
        self.topic = settings.topics.turn_events
        self._dlq_topic = settings.topics.dlq
        clash = set(GUARANTEES) & set(producer_options or {})
        if clash:
            raise ConfigurationError(f"producer options {sorted(clash)} are fixed by the publisher")
        # Counters: where every event is (see PublisherStats). The lock is also
        # the hand-over's: from sequence number to librdkafka or the spool.
        self._ledger = ledger = Ledger()
        self._failover = Failover(
            topic=self.topic,
            spool_dir=spool_dir,
            spool_max_bytes=spool_max_bytes,
            ledger=ledger,
            probe_interval=probe_interval,
            delivered=self._delivered,
            max_unacked_s=max_unacked_s if max_unacked_s > 0 else None,
        )
        ledger.inherited = ledger.spooled = self._failover.spool.pending_by_topic[self.topic]
        self._route = self._failover.route
        # Schema ids first: a registry that is away now fails here, before any
        # turn; afterwards the turn's path never calls it.
        self._write = turn_event_writers(settings, catalog, self.topic, schema_registry)
        self.metrics = PublisherMetrics(registry)
        # One producer-wide delivery callback: no per-message callback object to
        # carry. A full queue raises at once: the spool takes the event.
        self._producer = KafkaProducer(
            settings.client_config(PRODUCER_DEFAULTS, **{**(producer_options or {}), **GUARANTEES}),
            on_full="raise",
            on_delivery=self._on_delivery,
            error_cb=self._failover.on_error,
            log_failures=False,
        ).open()
        # Schema announcements are not events: their own producer keeps them out of the
        # delivery counts and the spool (every publisher re-announces). The runtime is the
        # schemas topic's one writer (docs/security.md): it announces the traces' and
        # observations' writer schemas too.
        self._schema_producer = KafkaProducer.plain(settings).open()
        for schema in announced_schemas(catalog, registered=self._write.registered):
            announce_schema(self._schema_producer.produce, settings.topics.schemas, schema)
        # Turn identity, assigned before encoding: spooled bytes are stamped already,
        # so the process that drains a spool never renumbers them.
        self._stamper = TurnStamper(producer_id=producer_id, id_factory=id_factory)
        self._versions_written: frozenset[int] = frozenset()  # replaced, read to sign
        self.producer_id = self._stamper.producer_id
        # Stream heads beside the spool, written by their own thread; a predecessor's (a
        # crash) are announced on <prefix>stream-heads. Idempotent: a retried checkpoint or
        # head note is stored once, in order.
        self._heads_announcer = KafkaProducer.plain(settings, **{"enable.idempotence": True}).open()
        # Signed checkpoints of the streams advanced, by the heads thread (no key: none,
        # the publisher's streams are unsigned).
        self.checkpointer = (
            None
            if checkpoints.key is None
            else Checkpointer(
                checkpoints,
                producer_id=self.producer_id,
                producer=self._heads_announcer,
                prefix=settings.topics.prefix,
                schemas=lambda: [
                    self._write.schema_fingerprints[v] for v in self._versions_written
                ],
            )
        )
        self._heads = HeadsFile(
            spool_dir,
            producer_id=self.producer_id,
            interval_s=head_interval_s,
            lock=ledger.lock,
            announcer=self._heads_announcer,
            prefix=settings.topics.prefix,
            checkpointer=self.checkpointer,
            liveness_interval_s=liveness_interval_s,
        )
        # v5 turns carry the interval this publisher announces its liveness at.
        self._stamper.liveness_interval_ms = round(self._heads.liveness_interval_s * 1000)
        # TURNAUDIT_SURFACE_KEYRING: data key records ride the turns' path (key_records).
        self._key_records = KeyRecordRoute(
            topic=settings.topics.surface_keys,
            failover=self._failover,
            ack=self._ack,
            registry=registry,
        )
        self._key_records.start(self._producer)
        self._sealing = PublisherSealing(self._key_records.store, surface_keys)
        # Journal mode: each turn fsynced (group commit) before it is produced.
        self._journal = (
            None
            if not journal
            else JournalMode[_Turn | KeyRecordTurn](
                spool_dir / "journal", self.producer_id, self._hand_over, ledger.lock
            )
        )
        if self._journal is not None:
            self._key_records.journal_append = self._journal.append
        self._closed = False
        self._lost = 0
        self.metrics.attach(self)
        self._failover.start(self._producer, also_poll=self._schema_producer.poll)

    # -- the runtime's call --------------------------------------------------
    def publish(self, event: OutgoingTurnEvent) -> str:
        """Stamp a copy of the event with the turn's identity (event id, producer
        id, stream position, predecessor hash), encode it, hand it to Kafka or
        the spool, and return the event id. See the module docstring for the
        contract; raises ``EventRefusedError`` or ``SerializationError`` only."""
        stamped = event.copy()  # the caller's dict is never written
        session = stamped["session_id"]
        key = session.encode()
        ledger = self._ledger
        # One lock from sequence number to hand-over: two threads publishing for
        # one session cannot swap their events' order.
        with ledger.lock:
            event_id = self._stamper.stamp(stamped)
            if self._sealing.active:  # sealed before encoding: the chain covers the sealed form
                try:  # its data key record is handed over first, ahead of the turn
                    self._sealing.seal(stamped)
                except (SpoolFullError, SpoolWriteError) as exc:  # no position used up
                    raise self._refuse(event_id, -1, exc) from None
            value = self._write(stamped)  # raises before a position is used up
            if (version := stamped["verdicts"]["schema_version"]) not in self._versions_written:
                self._versions_written = self._versions_written | {version}  # before heads
            heads = self._heads
            heads.dirty[(session, stamped["producer_id"])] = (
                stamped["sequence"],
                self._stamper.commit(stamped, value, self._write.fingerprint_of(stamped)),
                stamped["pack_id"],  # announced with the head: whose turns a crash lost
                stamped["runtime"]["name"],
            )
            heads.turns += 1
            if heads.turns == heads.wake_at:  # a signed checkpoint's count of turns
                heads.wake.set()
            journal = self._journal
            if journal is None and not self._route.spooling:
                # The common case, inline: to librdkafka, at the turn's event time capped at now.
                occurred, now_ms = stamped["occurred_at"], int(time.time() * 1000)
                at = (occurred if occurred <= now_ms else now_ms) if occurred > 0 else 0
                try:
                    self._producer.produce(self.topic, value, key, timestamp=at)
                    ledger.to_client()
                    return event_id
                except (QueueFullError, ProduceError) as exc:
                    if self._client_refused(exc, key, value):
                        return event_id  # set aside for good: counted as failed
            sealed = stamped.get("sealed")
            turn = _Turn(
                event_id,
                session,
                stamped["sequence"],
                stamped["occurred_at"],
                None if sealed is None else sealed["data_key_id"].encode(),
            )
            if journal is None:
                refusal = self._hand_over(turn, key, value, None)
            else:  # journal mode: the committer hands it over after its fsync
                ticket = journal.append(JournalEntry(self.topic, key, value), turn)
                if ticket is None:  # closed meanwhile
                    journal = None
                    refusal = self._hand_over(turn, key, value, None)
        if journal is not None and ticket is not None:
            refusal = journal.wait(ticket, key, value)
        if refusal is not None:
            log.error(
                "turn_event_refused",
                event_id=event_id,
                session_id=session,
                sequence=refusal.sequence,
                reason=refusal.reason,
                error=str(refusal),
            )
            raise refusal
        return event_id

    def _hand_over(
        self, turn: _Turn | KeyRecordTurn, key: bytes, value: bytes, ticket: int | None
    ) -> EventRefusedError | None:
        """The turn to librdkafka or the spool (under the ledger's lock); its refusal.
        ``ticket``: its journal ticket, acknowledged once it is dealt with."""
        if isinstance(turn, KeyRecordTurn):  # committed ahead of the turns sealed with it
            self._key_records.committed(key, value, ticket)
            return None
        ledger, route = self._ledger, self._route
        if not route.spooling:
            try:
                # Record time: the turn's event time capped at now (record_timestamp, inlined).
                occurred, now_ms = turn.occurred_at, int(time.time() * 1000)
                at = (occurred if occurred <= now_ms else now_ms) if occurred > 0 else 0
                if ticket is None:
                    self._producer.produce(self.topic, value, key, timestamp=at)
                else:
                    self._producer.produce(
                        self.topic,
                        value,
                        key,
                        timestamp=at,
                        on_delivery=functools.partial(self._journal_report, ticket),
                    )
                ledger.to_client()
                return None
            except (QueueFullError, ProduceError) as exc:
                if self._client_refused(exc, key, value):
                    self._ack(ticket)
                    return None
        self._failover.ensure_worker()  # it drains the spool: never without it
        try:
            self._key_records.before_spooling(turn.data_key)  # its key on disk first
            self._failover.spool.append(self.topic, key, value)
            ledger.to_spool()
            return None
        except (SpoolFullError, SpoolWriteError) as exc:
            return self._refuse(turn.event_id, turn.sequence, exc)
        finally:
            self._ack(ticket)  # spooled (on disk) or refused: the journal may forget it

    def _refuse(
        self, event_id: str, sequence: int, exc: SpoolFullError | SpoolWriteError
    ) -> EventRefusedError:
        reason = "spool_full" if isinstance(exc, SpoolFullError) else "disk_error"
        self._ledger.refuse(reason)
        message = f"event {event_id} refused: {exc}"
        return EventRefusedError(message, event_id=event_id, sequence=sequence, reason=reason)

    def _client_refused(self, exc: QueueFullError | ProduceError, key: bytes, value: bytes) -> bool:
        """librdkafka did not take the turn: True when it never will (too large, ...:
        counted as failed, kept in rejected/), else the spool takes it and what follows."""
        if isinstance(exc, ProduceError):
            if is_permanent(exc.error):
                self._ledger.to_client()
                self._ledger.failed()
                self._failover.reject(SpooledMessage(self.topic, key, value), exc.error)
                return True
            log.warning("produce_failed_spooling", error=str(exc))
        self._route.client_refused()  # a full queue, or a refusal: the spool takes it
        return False

    # -- journal mode ----------------------------------------------------------
    def _ack(self, ticket: int | None) -> None:
        if self._journal is not None:
            self._journal.ack(ticket)

    def _journal_report(
        self, ticket: int, err: DeliveryError | None, msg: DeliveredMessage
    ) -> None:
        self._on_delivery(err, msg)
        if self._journal is not None:
            self._journal.reported(ticket, purged=err is not None and is_purged(err))

    # -- delivery reports (on the failover's thread) ---------------------------
    def _on_delivery(self, err: DeliveryError | None, msg: DeliveredMessage) -> None:
        # Turn events only (dead letters and drained events carry their own
        # callback); this runs once per event, so it stays this small.
        if err is None:
            self._delivered(msg)
        else:
            self._failover.on_report(err, msg)

    def _delivered(self, msg: DeliveredMessage) -> None:
        self._ledger.reported()
        self._ledger.delivered += 1
        latency = msg.latency()
        if latency is not None:
            self.metrics.delivery_latency.observe(latency)

    # -- reading the state -----------------------------------------------------
    def stats(self) -> PublisherStats:
        spool = self._failover.spool
        with self._ledger.lock:
            return self._ledger.snapshot(
                spool_bytes=spool.size_bytes, oldest_appended_at=spool.oldest_appended_at
            )

    def refused_by_reason(self) -> dict[str, int]:
        with self._ledger.lock:
            return dict(self._ledger.refused_by_reason)

    def checkpoint_counts(self) -> tuple[int, int, int]:
        """Signed checkpoints: (acknowledged, failed attempts, waiting); zeros without a key."""
        c = self.checkpointer
        return (0, 0, 0) if c is None else (c.written, c.failures, c.unsent())

    @property
    def spooled_total(self) -> int:
        """Events that went to the spool since the publisher started."""
        return self._ledger.spooled_total

    # -- lifecycle -----------------------------------------------------------
    def close(self, timeout: float = 30.0) -> CloseReport:
        """Flush; whatever the broker did not take stays in the spool, reported
        here. Never raises for delivery problems; calling it twice is harmless."""
        if self._closed:
            return self._report()
        deadline = time.monotonic() + timeout
        journal = self._journal
        if journal is not None:  # commits and hands over what is pending first
            journal.close()
            with self._ledger.lock:
                self._journal = None  # publish() after close() spools, as in the default mode
                self._key_records.journal_append = None
        lost = self._failover.close(deadline)
        if journal is not None and lost == 0:
            journal.discard()  # everything is delivered, spooled or rejected by now
        self._schema_producer.flush(min(5.0, max(0.0, deadline - time.monotonic())))
        self._heads.close(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
        self._closed = True
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
            undelivered=len(self._failover.spool),
            failed=s.failed,
            spool_dir=str(self._failover.spool.directory),
            refused=s.refused,
            lost=self._ledger.lost,
        )
