"""The follower's trust feed: a thread reading ``<prefix>checkpoints`` beside the loop that
holds the turns to the signed heads, both under one lock (``turnaudit.verify.follow_trust``
judges; this module feeds it and exports its counts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

import structlog

from turnaudit.checkpoints import checkpoints_topic, decode_checkpoint
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.identity import LEGACY_PRODUCER, chain_hash
from turnaudit.kafka.consumer import BEGINNING, READER, KafkaConsumer
from turnaudit.kafka.offsets import watermarks
from turnaudit.settings import KafkaSettings
from turnaudit.verify.follow_trust import FollowTrust
from turnaudit.verify.kafka_reads import LOG_APPEND_TIME

log = structlog.get_logger("turnaudit.verify.follow")


class TrustFeed:
    """The follower's trust state, shared by the loop (turns, sweep, checkpoint) and the
    thread that reads ``<prefix>checkpoints`` (under one lock); its metrics."""

    def __init__(
        self,
        kafka: KafkaSettings,
        trust: FollowTrust,
        metrics: FollowMetrics,
        *,
        clock: Callable[[], float] = time.time,
        idle_check_s: float = 1.0,
    ) -> None:
        self._kafka = kafka
        self._trust = trust
        self._metrics = metrics
        self._clock = clock
        self._idle_check_s = idle_check_s
        self._topic = checkpoints_topic(kafka.topics.prefix)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._horizon_ms: int | None = None  # every checkpoint written before it is read
        self._exported = 0.0

    def start(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        with self._lock:
            self._trust.load(records)
            self._export()
        self._thread = threading.Thread(target=self._run, name="verify-checkpoints", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    # -- the loop's side ---------------------------------------------------------------
    def observe(
        self,
        partition: int,
        event: Mapping[str, object],
        value: bytes,
        now: float,
        fingerprint: bytes | None = None,
    ) -> None:
        producer = event.get("producer_id") or LEGACY_PRODUCER
        sequence = event.get("sequence")
        if not isinstance(sequence, int):
            return
        # The grace runs from arrival, not occurred_at: a turn published late (spooled)
        # is still signed within the publisher's interval of being handed on.
        with self._lock:
            self._trust.observe(
                (str(event["session_id"]), str(producer)),
                partition,
                sequence,
                chain_hash(value, fingerprint),
                int(now * 1000),
                schema="" if fingerprint is None else fingerprint.hex(),
            )

    def sweep(self, event_time_ms: Mapping[int, int]) -> bool:
        """Judge what the grace has run out on; True when the trust state changed (the
        reader took checkpoints, a stream was judged) and is to be checkpointed."""
        with self._lock:
            self._trust.sweep(horizon_ms=self._horizon_ms, event_time_ms=event_time_ms)
            self._export()
            return self._trust.changed()

    def checkpoint(self) -> list[tuple[bytes, bytes | None]]:
        with self._lock:
            return self._trust.checkpoint()

    def _export(self) -> bool:
        """Metrics from the state (under the lock; the gauges at most once a second: they
        count every stream); True when a forgery was found."""
        m = self._metrics
        found = self._trust.found()
        now = self._clock()
        if found or now - self._exported >= 1.0:  # a forgery shows on the gauge at once
            self._exported = now
            for state, n in self._trust.by_status().items():
                m.trust.labels(state).set(n)
        for forgery in found:
            m.forgeries.labels(forgery.reason).inc()
            session, producer = forgery.stream or ("", "")
            log.error(
                "verify_forgery",
                reason=forgery.reason,
                session_id=session,
                producer_id=producer,
                detail=forgery.detail,
            )
        return bool(found)

    # -- the reader thread ----------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._read()
            except Exception as exc:  # any failure: logged, the reader starts over from
                # the offsets taken (nothing is judged unsigned past what it has read)
                log.warning("verify_checkpoints_unreadable", topic=self._topic, error=repr(exc))
                self._stop.wait(2.0)

    def _read(self) -> None:
        marks = watermarks(self._kafka, self._topic)
        with self._lock:
            starts = {p: self._trust.reader_offsets.get(p, BEGINNING) for p in marks.high}
        consumer = KafkaConsumer(self._kafka, self._topic, READER)
        try:
            consumer.assign(starts)
            checked = 0.0
            while not self._stop.is_set():
                records = consumer.consume(500, 0.5)
                with self._lock:
                    for record in records:
                        self._take(
                            record.partition() or 0,
                            record.offset() or 0,
                            record.value(),
                            record.timestamp(),
                        )
                    self._export()
                if not records and self._clock() - checked >= self._idle_check_s:
                    checked = self._clock()
                    self._caught_up(checked)
        finally:
            consumer.close()

    def _take(
        self, partition: int, offset: int, value: bytes | None, stamp: tuple[int, int]
    ) -> None:
        self._trust.read_to(partition, offset + 1)
        checkpoint = decode_checkpoint(value)
        if checkpoint is None:
            return  # a tombstone, or not a checkpoint: one-shot verify counts those
        kind, at = stamp
        verdict = self._trust.take_checkpoint(checkpoint, at if kind == LOG_APPEND_TIME else None)
        self._metrics.signed_checkpoints.labels(
            "valid" if verdict.problem is None else "invalid"
        ).inc()

    def _caught_up(self, asked: float) -> None:
        """Every checkpoint appended before ``asked`` is read: the horizon moves there."""
        marks = watermarks(self._kafka, self._topic)
        with self._lock:
            done = all(
                self._trust.reader_offsets.get(p, marks.low.get(p, 0)) >= high
                for p, high in marks.high.items()
            )
            if done:
                self._horizon_ms = int(asked * 1000)
                self._metrics.checkpoints_read_to.set(asked)
