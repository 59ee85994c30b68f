"""The publisher's dead letters (``TurnEventPublisher.dead_letter``): an event the runtime
built but must not publish as valid goes to the DLQ, sealed like a turn, by the turns' route."""

from __future__ import annotations

import time

import structlog

from turnaudit.dead_letters import dead_letter_headers
from turnaudit.errors import EventRefusedError, SpoolFullError, SpoolWriteError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.identity import TurnStamper
from turnaudit.kafka.producer import KafkaProducer, ProduceError, QueueFullError
from turnaudit.kafka.schema_writers import TurnEventWriters
from turnaudit.producers.accounting import Ledger
from turnaudit.producers.failover import Failover
from turnaudit.producers.key_records import KeyRecordRoute
from turnaudit.producers.ordering import record_timestamp
from turnaudit.producers.route import Route
from turnaudit.producers.spool import bytes_headers
from turnaudit.sealing.key_topic import PublisherSealing

log = structlog.get_logger("turnaudit.publisher")


class DeadLetterSending:
    """``dead_letter()``, for the publisher, which sets these parts up."""

    topic: str
    _dlq_topic: str
    _ledger: Ledger
    _route: Route
    _producer: KafkaProducer
    _failover: Failover
    _stamper: TurnStamper
    _sealing: PublisherSealing
    _key_records: KeyRecordRoute
    _write: TurnEventWriters

    def dead_letter(self, event: OutgoingTurnEvent, reason: str, error: str) -> None:
        """Send an event the runtime built but must not publish as valid to the DLQ.

        It keeps an event id but takes no sequence number, so the session's sequence shows
        no gap for it. The caller's dict is not written. Same guarantees as ``publish()``:
        raises ``EventRefusedError`` when it can be neither sent nor spooled.
        """
        letter = event.copy()
        letter["event_id"] = event_id = self._stamper.new_event_id()
        letter["sequence"] = -1
        headers = dead_letter_headers(
            reason=reason,
            error=error,
            topic=self.topic,
            partition=None,
            offset=None,
            stage="producer",
        )
        key = letter["session_id"].encode()
        with self._ledger.lock:  # the lock a data key record is handed over under
            try:
                self._sealing.seal(letter)  # sealed like a turn (when sealing is on)
                value = self._write(letter)
                self._ledger.dead_lettered += 1
                if not self._route.spooling:
                    try:
                        # Stamped like a turn (verify matches producer-side dead letters to
                        # a range by record time, the range's turns' event time).
                        self._producer.produce(
                            self._dlq_topic,
                            value,
                            key,
                            headers=headers,
                            timestamp=record_timestamp(
                                letter["occurred_at"], int(time.time() * 1000)
                            ),
                            on_delivery=self._failover.on_dead_letter_report,
                        )
                        return
                    except (QueueFullError, ProduceError):
                        self._route.client_refused()
                sealed = letter.get("sealed")
                if sealed is not None:  # its data key record on disk first
                    self._key_records.before_spooling(sealed["data_key_id"].encode())
                self._failover.spool.append(self._dlq_topic, key, value, bytes_headers(headers))
                return
            except (SpoolFullError, SpoolWriteError) as exc:
                refusal = EventRefusedError(
                    f"dead letter {event_id} refused: {exc}",
                    event_id=event_id,
                    sequence=-1,
                    reason="spool_full" if isinstance(exc, SpoolFullError) else "disk_error",
                )
        # Not an event of the stream (no sequence number): logged, not counted as refused.
        log.critical(
            "dead_letter_refused", event_id=event_id, reason=refusal.reason, error=str(refusal)
        )
        raise refusal
