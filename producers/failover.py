"""The publisher's failover: the on-disk spool while the broker is away.

* ``Route`` (``turnaudit.producers.route``) holds the routing decisions alone.
* ``Failover`` carries them out: a background thread serves librdkafka's
  callbacks, probes the broker, drains the spool in order, and survives any
  error (logged, counted, retried after a pause). Delivery reports of
  anything but a delivered event come here: an event the broker refused for
  good goes to ``<spool_dir>/rejected``; one purged at close is handed back to
  the front of the spool, for the next publisher.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from turnaudit.errors import PublishError
from turnaudit.kafka.producer import (
    DeliveredMessage,
    DeliveryError,
    KafkaProducer,
    ProduceError,
    QueueFullError,
    is_permanent,
    is_purged,
)
from turnaudit.producers.accounting import Ledger
from turnaudit.producers.journal import recover_journal
from turnaudit.producers.ordering import (
    TurnFacts,
    in_stream_order,
    record_timestamp,
    shipped_turn_reader,
)
from turnaudit.producers.route import Route
from turnaudit.producers.spool import (
    SpooledMessage,
    SpoolRecord,
    as_bytes,
    bytes_headers,
    open_spool,
)
from turnaudit.records import ClientError

log = structlog.get_logger("turnaudit.publisher")

DRAIN_BATCH = 500
WORKER_PAUSE_S = 0.5  # after an unexpected error in the background thread
_POLL_S = 0.05


class _DrainBatch:
    """Spooled records handed to librdkafka; committed once all are reported."""

    def __init__(self, records: list[SpoolRecord]) -> None:
        self.records = records
        self.reported = [False] * len(records)
        self.outstanding = 0

    def done_prefix(self) -> int:
        """How many leading records are dealt with (delivered, or set aside)."""
        for i, done in enumerate(self.reported):
            if not done:
                return i
        return len(self.reported)


class Failover:
    """Spool, rejected messages, the background thread and the hand-back at close."""

    def __init__(
        self,
        *,
        topic: str,
        spool_dir: Path,
        spool_max_bytes: int,
        ledger: Ledger,
        probe_interval: float,
        delivered: Callable[[DeliveredMessage], None],
        max_unacked_s: float | None = None,
        reader: Callable[[bytes], TurnFacts] | None = None,
    ) -> None:
        self.topic = topic
        # Reads a turn's stream position and occurred_at: what librdkafka hands back is
        # spooled in stream order, and a drained turn keeps its event time as timestamp.
        read = self._read = reader or shipped_turn_reader()
        self._position: Callable[[bytes], int | None] = lambda value: read(value).position
        # Age bound: an event librdkafka has not had acknowledged within this
        # many seconds is moved to the spool (with everything queued behind it).
        self.max_unacked_s = max_unacked_s
        self._delivered = delivered  # counts a delivered event (and its latency)
        # A journal a crashed publisher left (journal mode): its turns go in front of
        # the spool, before the spool is opened and counted.
        self.recovered = recover_journal(spool_dir, spool_max_bytes, topic, self._position)
        self.spool = open_spool(spool_dir, spool_max_bytes)
        # Messages the broker refused for good, for an operator to inspect.
        self.rejected = open_spool(spool_dir / "rejected", spool_max_bytes)
        self._ledger = ledger
        # Route new events to the spool while it holds anything: order per session.
        self.route = Route(spooling=len(self.spool) > 0, probe_interval=probe_interval)
        self._producer: KafkaProducer | None = None
        self._also_poll: Callable[[], object] = lambda: None
        self._handback: list[SpooledMessage] = []
        self._batch: _DrainBatch | None = None
        self._closing = threading.Event()
        self._worker: threading.Thread | None = None

    def start(self, producer: KafkaProducer, also_poll: Callable[[], object]) -> None:
        self._producer = producer
        self._also_poll = also_poll
        self.ensure_worker()

    @property
    def worker(self) -> threading.Thread | None:
        return self._worker

    def ensure_worker(self) -> None:
        """Start the background thread, or restart it should it ever have stopped:
        the spool is never without it."""
        if (self._worker is None or not self._worker.is_alive()) and not self._closing.is_set():
            self._worker = threading.Thread(
                target=self._run, name="turnaudit-publisher", daemon=True
            )
            self._worker.start()

    # -- librdkafka's callbacks (inside poll, on whichever thread polls) ---------------
    def on_error(self, err: ClientError) -> None:
        if err.fatal:
            # The idempotent producer cannot go on (librdkafka says so): events
            # already queued are reported failed and kept in rejected/.
            log.critical("producer_fatal_error", error=err.text, code=err.name)
        if err.brokers_down and self.route.brokers_down():
            log.warning("broker_unreachable", error=err.text)

    def on_report(
        self, err: DeliveryError | None, msg: DeliveredMessage, *, handback: bool = True
    ) -> bool:
        """A delivery report other than a delivered event's; True when the
        message was purged at close (it goes back to the spool)."""
        is_event = msg.topic() == self.topic
        if err is None:
            return False  # a dead letter delivered
        kept = SpooledMessage(
            msg.topic() or self.topic,
            as_bytes(msg.key()),
            as_bytes(msg.value()),
            bytes_headers(msg.headers()),
        )
        if is_event:
            self._ledger.reported()
        if is_purged(err):
            # Purged at close() or for age: back to the spool (a drained one never left it).
            # An in-flight one may also have reached the broker: a duplicate
            # with the same event id.
            with self._ledger.lock:
                if is_event:
                    self._ledger.purged_back()
                if handback:
                    self._handback.append(kept)
            return True
        # With message.timeout.ms=0 only a permanent error gets here (too large,
        # not authorised, ...): retrying cannot help, so it is set aside, kept
        # on disk and reported, never dropped.
        if is_event:
            with self._ledger.lock:
                self._ledger.failed()
        self.reject(kept, err)
        return False

    def on_dead_letter_report(self, err: DeliveryError | None, msg: DeliveredMessage) -> None:
        self.on_report(err, msg)

    def _on_drained(
        self, batch: _DrainBatch, index: int, err: DeliveryError | None, msg: DeliveredMessage
    ) -> None:
        if err is None and msg.topic() == self.topic:
            self._delivered(msg)
        purged = self.on_report(err, msg, handback=False)
        batch.outstanding -= 1
        batch.reported[index] = not purged

    def reject(self, kept: SpooledMessage, err: DeliveryError) -> None:
        """Keep a message the broker (or librdkafka) refused for good in rejected/."""
        log.error("delivery_failed", error=err.str(), code=err.name(), topic=kept.topic)
        try:
            self.rejected.append(kept.topic, kept.key, kept.value, kept.headers)
        except PublishError as exc:
            log.critical(
                "rejected_event_not_kept", spool_dir=str(self.rejected.directory), error=str(exc)
            )

    # -- background: poll, notice recovery, drain the spool ----------------------------
    def _run(self) -> None:
        producer = self._producer
        assert producer is not None
        route = self.route
        while not self._closing.is_set():
            try:
                producer.poll(_POLL_S)
                self._also_poll()
                self._enforce_age_bound(producer)
                if not route.spooling:
                    continue
                if route.probe_due(time.monotonic()) and route.probed(
                    producer.reachable(self.topic, timeout=1.0)
                ):
                    log.info("broker_reachable_again")
                if route.may_drain(producer.queued()):
                    self._drain_once(producer)
            except Exception as exc:  # the thread must outlive any error
                self._ledger.worker_errors += 1
                log.error("publisher_worker_error", error=repr(exc))
                self._closing.wait(WORKER_PAUSE_S)

    def _enforce_age_bound(self, producer: KafkaProducer) -> None:
        """Move what librdkafka holds to the spool once its oldest event waited
        longer than ``max_unacked_s`` (a hung broker answers nothing, yet
        librdkafka declares it down only after a minute or more)."""
        bound = self.max_unacked_s
        now = time.monotonic()
        if bound is None or self._ledger.oldest_unacked_age(now) <= bound:
            return
        if self._batch is not None:
            return  # a drain batch is on disk already; it settles first
        with self._ledger.lock:  # from here on publish() spools, behind what comes back
            queued = producer.queued()
            if queued == 0:
                # The hand-over times are an estimate (reports do not come back in
                # hand-over order): with nothing in librdkafka, nothing is waiting.
                self._ledger.handed_at.clear()
                return
            self.route.unacked_too_old(now)
        log.warning("unacknowledged_events_to_spool", events=queued, max_unacked_s=bound)
        producer.purge()
        deadline = time.monotonic() + 5.0
        while producer.queued() and time.monotonic() < deadline:
            producer.poll(_POLL_S)  # serves the purge reports: they fill the hand-back
        producer.poll(0)
        with self._ledger.lock:
            handback, self._handback = self._handback, []
            self._ledger.aged_out += sum(m.topic == self.topic for m in handback)
        ordered = in_stream_order(handback, self.topic, self._position)
        try:
            # Older than anything publish() spooled since: in front, order kept.
            # A late delivery of an in-flight original is a duplicate with the
            # same event id, which readers count once.
            self.spool.requeue_front(ordered)
        except (PublishError, OSError) as exc:
            # The disk cannot take them (full, failing): back into librdkafka's
            # memory, in order, rather than lost; the bound tries the disk again
            # once they are old again. The spool drains only behind them.
            log.error(
                "unacknowledged_events_kept_in_memory",
                events=sum(m.topic == self.topic for m in ordered),
                error=str(exc),
            )
            self._back_to_client(producer, ordered)

    def _back_to_client(self, producer: KafkaProducer, messages: list[SpooledMessage]) -> None:
        now_ms = int(time.time() * 1000)
        for message in messages:
            is_event = message.topic == self.topic
            occurred = self._read(message.value).occurred_at
            with self._ledger.lock:
                producer.produce(
                    message.topic,
                    message.value,
                    message.key,
                    headers=message.headers,
                    timestamp=record_timestamp(occurred, now_ms),
                    on_delivery=None if is_event else self.on_dead_letter_report,
                    on_full="wait",  # the purge just emptied the queue: room for all of them
                )
                if is_event:
                    self._ledger.drained()  # counted spooled by its purge report: in flight again

    def _drain_once(self, producer: KafkaProducer) -> None:
        if self._batch is not None:  # left by an error: finish it before reading more
            while self._batch.outstanding > 0 and not self._closing.is_set():
                producer.poll(_POLL_S)
            self._settle_batch()
        records = self.spool.read(limit=DRAIN_BATCH)
        if not records:
            self._stop_spooling_if_empty()
            return
        batch = self._batch = _DrainBatch(records)
        for index, record in enumerate(records):
            if not self._hand_over(producer, batch, index, record.message):
                return  # closing: close() settles the batch
        # Every record is reported before the batch leaves the spool: a second
        # outage now leaves it in librdkafka's queue, retried, never repeated.
        while batch.outstanding > 0 and not self._closing.is_set():
            producer.poll(_POLL_S)
        if not self._closing.is_set():
            self._settle_batch()
            self._stop_spooling_if_empty()

    def _hand_over(
        self, producer: KafkaProducer, batch: _DrainBatch, index: int, message: SpooledMessage
    ) -> bool:
        """One spooled message to librdkafka; False when closing stopped it."""
        is_event = message.topic == self.topic
        # A turn (or a dead letter: a turn too) keeps its event time however late it is
        # drained; 0, the produce time, for what this build cannot read.
        occurred = self._read(message.value).occurred_at
        while not self._closing.is_set():
            try:
                with self._ledger.lock:
                    producer.produce(
                        message.topic,
                        message.value,
                        message.key,
                        headers=message.headers,
                        timestamp=record_timestamp(occurred, int(time.time() * 1000)),
                        on_delivery=functools.partial(self._on_drained, batch, index),
                        on_full="raise",
                    )
                    batch.outstanding += 1
                    if is_event:
                        self._ledger.drained()
                return True
            except QueueFullError:
                producer.poll(_POLL_S)
            except ProduceError as exc:
                if is_permanent(exc.error):  # never going to be taken: set aside
                    with self._ledger.lock:
                        if is_event:
                            self._ledger.drained()
                            self._ledger.reported()
                            self._ledger.failed()
                    self.reject(message, exc.error)
                    batch.reported[index] = True
                    return True
                log.warning("drain_produce_failed", error=str(exc))
                self._closing.wait(WORKER_PAUSE_S)
        return False

    def _settle_batch(self) -> None:
        """Take the batch's leading dealt-with records out of the spool."""
        batch, self._batch = self._batch, None
        if batch is None:
            return
        done = batch.done_prefix()
        if done:
            self.spool.commit(batch.records[done - 1].end, done)

    def _stop_spooling_if_empty(self) -> None:
        # Under the lock publish() appends with, so no event is left behind.
        with self._ledger.lock:
            if len(self.spool) == 0:
                self.route.spool_empty()

    # -- close -------------------------------------------------------------------------
    def close(self, deadline: float) -> int:
        """Drain until ``deadline`` while the broker answers, stop the thread, flush,
        and put what librdkafka still holds in front of the spool. Returns the
        events that could not be put back on disk (counted as failed)."""
        producer = self._producer
        assert producer is not None
        # The worker keeps serving while anything waits: in the spool, or in librdkafka,
        # whose events the age bound may still move to the spool (after close began, too:
        # waiting on the spool alone would stop the worker with them on disk).
        while (
            (self.route.spooling or producer.queued() > 0)
            and time.monotonic() < deadline
            and (self._worker is not None and self._worker.is_alive())
        ):
            time.sleep(_POLL_S)  # let the worker drain the spool if the broker comes back
        self._closing.set()
        if self._worker is not None:
            self._worker.join()
        producer.flush(max(0.0, deadline - time.monotonic()))
        if producer.queued():
            producer.purge()
        producer.flush(0)  # serves the purge reports
        lost = 0
        try:
            self._settle_batch()
            # The client's queue is older than anything spooled: it goes in front.
            self.spool.requeue_front(in_stream_order(self._handback, self.topic, self._position))
        except (PublishError, OSError) as exc:
            with self._ledger.lock:
                lost = sum(m.topic == self.topic for m in self._handback)
                self._ledger.lose(lost)
            log.critical("undelivered_events_not_kept", events=lost, error=str(exc))
        self._handback = []
        self.spool.close()
        self.rejected.close()
        with self._ledger.lock:
            self.route.closed()
        return lost
