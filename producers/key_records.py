"""Data key records on the turn's own path: never less durable than a turn sealed under them.

A session's data key record (``turnaudit.sealing.DataKeyRecord``) is handed over the
moment its key is made, under the publisher's lock, ahead of the first turn sealed
with it, and exactly as that turn will be:

* journal mode: appended to the journal (fsynced in the same or an earlier group
  commit than the turn); a crash puts it in front of the spool with the turns;
* broker reachable: to the publisher's own idempotent producer (``acks=all``), whose
  purge at close or for age puts it in front of the spool like a turn;
* spooling: appended to the spool before the turn, drained ahead of it.

One gap is closed by hand: a record in librdkafka's memory while a later turn of its
session goes to the spool (the route switched in between) would die with the process
and leave the spooled turn unopenable, so such a record is spooled again first (the
key topic is compacted: a second copy of a record under its id changes nothing).
docs/privacy.md ("Durability of the data keys") says why this path and not waiting.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry, Counter

from turnaudit.errors import PublishError
from turnaudit.kafka.producer import (
    DeliveredMessage,
    DeliveryError,
    KafkaProducer,
    ProduceError,
    QueueFullError,
    is_permanent,
)
from turnaudit.producers.failover import Failover
from turnaudit.producers.journal_records import JournalEntry
from turnaudit.producers.spool import SpooledMessage
from turnaudit.sealing import DataKeyRecord

log = structlog.get_logger("turnaudit.publisher")

DATA_KEYS_TOTAL = "turnaudit_surface_data_keys_total"
DATA_KEYS_LOST_TOTAL = "turnaudit_surface_data_keys_lost_total"


@dataclass(frozen=True, slots=True)
class KeyRecordTurn:
    """A data key record waiting in the journal for its group commit (the journal
    hands it over, in journal order, ahead of the turns sealed under it)."""

    data_key_id: bytes


# Appends an entry to the journal (journal mode): its ticket, None when not journaling.
JournalAppend = Callable[[JournalEntry, KeyRecordTurn], "int | None"]


class KeyRecordRoute:
    """The publisher's data key records: to librdkafka, the spool or the journal."""

    def __init__(
        self,
        *,
        topic: str,
        failover: Failover,
        ack: Callable[[int | None], None],
        registry: CollectorRegistry | None,
    ) -> None:
        self.topic = topic
        self._failover = failover
        self._ack = ack  # acknowledges a journal ticket (a no-op without the journal)
        self._producer: KafkaProducer | None = None
        self.journal_append: JournalAppend | None = None
        # Handed to librdkafka and not reported yet: data key id -> its record's bytes.
        self.in_client: dict[bytes, bytes] = {}
        self.made = Counter(
            DATA_KEYS_TOTAL, "Surface data keys made (one per session seen).", registry=registry
        )
        self.lost = Counter(
            DATA_KEYS_LOST_TOTAL,
            "Surface data key records refused for good or not kept: their turns cannot be opened.",
            registry=registry,
        )

    def start(self, producer: KafkaProducer) -> None:
        self._producer = producer

    def store(self, record: DataKeyRecord) -> None:
        """Under the publisher's lock, before the turn sealed with it is handed over;
        raises ``SpoolFullError`` / ``SpoolWriteError`` when it can be kept nowhere
        (the turn is then refused, and the key forgotten)."""
        key, value = record.data_key_id.encode(), record.encode()
        append = self.journal_append
        entry = JournalEntry(self.topic, key, value)
        ticket = None if append is None else append(entry, KeyRecordTurn(key))
        if ticket is None:
            self.hand_over(key, value, None)
        self.made.inc()

    def hand_over(self, key: bytes, value: bytes, ticket: int | None) -> None:
        """The record to librdkafka or, while spooling, the spool (under the lock); raises
        ``SpoolFullError`` / ``SpoolWriteError`` when neither takes it."""
        producer = self._producer
        assert producer is not None
        if not self._failover.route.spooling:
            try:
                producer.produce(
                    self.topic, value, key, on_delivery=functools.partial(self._report, ticket)
                )
                self.in_client[key] = value
                return
            except (QueueFullError, ProduceError) as exc:
                if isinstance(exc, ProduceError) and is_permanent(exc.error):
                    self.lost.inc()
                    self._failover.reject(SpooledMessage(self.topic, key, value), exc.error)
                    self._ack(ticket)
                    return
                self._failover.route.client_refused()
        self._failover.ensure_worker()
        self._failover.spool.append(self.topic, key, value)  # raises: kept nowhere
        self._ack(ticket)

    def committed(self, key: bytes, value: bytes, ticket: int | None) -> None:
        """A record the journal committed (or gave back when its disk failed), handed over;
        never raises: one the spool cannot take is logged and counted lost (it stays in the
        journal, unacknowledged: a crash re-sends it, a clean close discards it)."""
        try:
            self.hand_over(key, value, ticket)
        except PublishError as exc:
            self.lost.inc()
            log.critical("surface_key_not_kept", data_key_id=key.decode(), error=str(exc))

    def before_spooling(self, data_key_id: bytes | None) -> None:
        """Under the lock, before a turn sealed under ``data_key_id`` is appended to the
        spool: its record, when still only in librdkafka's memory, goes there first."""
        if data_key_id is None:
            return
        value = self.in_client.get(data_key_id)
        if value is not None:
            self._failover.spool.append(self.topic, data_key_id, value)  # raises: turn refused
            self.in_client.pop(data_key_id, None)

    def _report(self, ticket: int | None, err: DeliveryError | None, msg: DeliveredMessage) -> None:
        key = msg.key()  # dict.pop is atomic: no lock needed against before_spooling
        self.in_client.pop(key if isinstance(key, bytes) else b"", None)
        purged = self._failover.on_report(err, msg)  # purged: back to the spool; refused: kept
        if err is not None and not purged:
            self.lost.inc()
        if not purged:
            self._ack(ticket)  # delivered or set aside; a purged one waits for the spool
