"""``turnaudit verify --follow``: a consumer service that keeps proving the stream.

It runs on the consumer runtime like the other services (its own group, static
membership, health, ``/metrics``, ``--workers N``). Its validation checks every
message as it arrives against the proof so far (``turnaudit.verify.follow``:
present once, chained, in order, late arrivals closing gaps) and never
dead-letters (the other services do); its sink writes, at every flush, the
proof of what changed to the compacted ``<prefix>verify-state`` topic and
returns only once it is durable, so the offsets the runtime then stores never
pass the checkpoint (at-least-once, and they agree). A partition taken over
(at start, or after a rebalance) is loaded from its checkpoint first; messages
below its proved offset are skipped (counted ``reread``), so a restart resumes
where the proof stopped.

With a keyring (``--keyring FILE``) it also judges each stream's trust against the
signed checkpoints (``turnaudit.verify.follow_trust``): a thread of its own reads
``<prefix>checkpoints`` from where the checkpointed trust state stopped, each checkpoint
judged as it is read; the turns are held to the signed heads as they arrive. The trust
state (per stream, the last valid checkpoint per producer, how far the checkpoints topic
was read) is checkpointed in the same flush as the proof.

Metrics (every label value from a closed set): ``turnaudit_verify_*``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from turnaudit.checkpoints import checkpoints_topic, decode_checkpoint
from turnaudit.consumers.runtime import ConsumedTurn, Sink, Validation
from turnaudit.consumers.runtime.sink import IN_ORDER, Rejection
from turnaudit.consumers.runtime.validation import decode_message
from turnaudit.contracts import Contract
from turnaudit.errors import BrokerError
from turnaudit.identity import LEGACY_PRODUCER, chain_hash
from turnaudit.kafka.consumer import BEGINNING, READER, KafkaConsumer
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.kafka.state_topic import read_state, verify_state_topic
from turnaudit.serialization.wire import DecodedTurnEvent, Framing, TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.follow import CHAIN_KINDS, FollowState, Outcome
from turnaudit.verify.follow_trust import REASONS, FollowTrust
from turnaudit.verify.kafka_reads import LOG_APPEND_TIME

log = structlog.get_logger("turnaudit.verify.follow")

_UNDECODABLE = DecodedTurnEvent({}, 0, Framing.SINGLE_OBJECT, "")
MISSING_STATES = ("within_grace", "overdue")
STREAM_STATES = ("open", "began_before_retention")


class FollowMetrics:
    """``turnaudit_verify_*``: what the follower proved since it started."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.proved = Counter("turnaudit_verify_turns_proved", "Turns proved present, in "
                              "order or late, since start", registry=registry)
        self.late = Counter("turnaudit_verify_late_turns", "Turns that closed a gap (stored "
                            "after later positions of their stream)", registry=registry)
        self.duplicates = Counter("turnaudit_verify_duplicates", "Copies of a stored turn "
                                  "(same bytes at a taken position)", registry=registry)
        self.chain_breaks = Counter("turnaudit_verify_chain_breaks", "Chain breaks (chain) "
                                    "and another event at a taken position (position_reused)",
                                    ["kind"], registry=registry)
        self.lost = Counter("turnaudit_verify_lost_turns", "Positions still missing after "
                            "the grace for late arrivals", registry=registry)
        self.breaches = Counter("turnaudit_verify_breaches", "Contract breaches of proved "
                                "turns, by contract", ["contract"], registry=registry)
        self.undecodable = Counter("turnaudit_verify_undecodable", "Messages that are not "
                                   "TurnEvents", registry=registry)
        self.reread = Counter("turnaudit_verify_reread_messages", "Messages read again below "
                              "a partition's checkpoint (skipped)", registry=registry)
        self.checkpoints = Counter("turnaudit_verify_checkpoints", "Checkpoints made durable",
                                   registry=registry)
        self.missing = Gauge("turnaudit_verify_missing_turns", "Positions missing now, within "
                             "the grace or past it", ["state"], registry=registry,
                             multiprocess_mode="livesum")
        self.streams = Gauge("turnaudit_verify_streams", "Ordered streams held (open) and "
                             "those that began before retention", ["state"],
                             registry=registry, multiprocess_mode="livesum")
        self.proved_offset = Gauge("turnaudit_verify_proved_offset", "Offset proved to, per "
                                   "partition", ["partition"], registry=registry,
                                   multiprocess_mode="livemostrecent")
        self.proved_time = Gauge("turnaudit_verify_proved_event_time_seconds", "occurred_at "
                                 "of the last turn proved, per partition", ["partition"],
                                 registry=registry, multiprocess_mode="livemostrecent")
        self.trust = Gauge("turnaudit_verify_stream_trust", "Streams by trust against the "
                           "signed checkpoints (--keyring): signed, unsigned, forged, "
                           "truncated, or pending within the grace", ["trust"],
                           registry=registry, multiprocess_mode="livesum")
        self.forgeries = Counter("turnaudit_verify_forgeries", "Forgeries found (--keyring): "
                                 "invalid checkpoints by problem, streams found forged by "
                                 "reason", ["reason"], registry=registry)
        self.signed_checkpoints = Counter("turnaudit_verify_signed_checkpoints", "Signed "
                                          "checkpoints read (--keyring), valid or invalid",
                                          ["result"], registry=registry)
        self.checkpoints_read_to = Gauge(
            "turnaudit_verify_signed_checkpoints_read_to_seconds", "Every signed checkpoint "
            "appended before this time is read (--keyring; 0 until the reader first reaches "
            "the topic's end): streams are judged unsigned only up to it", registry=registry,
            multiprocess_mode="livemax")
        for kind in CHAIN_KINDS:
            self.chain_breaks.labels(kind)
        for reason in REASONS:
            self.forgeries.labels(reason)
        for result in ("valid", "invalid"):
            self.signed_checkpoints.labels(result)
        for contract in Contract:
            self.breaches.labels(contract.value)
        for state in MISSING_STATES:
            self.missing.labels(state)


class FollowValidation(Validation):
    """Every message checked against the proof so far; nothing is ever rejected (the
    follower writes no dead letters), so every message reaches the sink."""

    def __init__(
        self,
        decode: TurnEventDeserializer,
        state: FollowState,
        metrics: FollowMetrics,
        load: Callable[[int, int], None],
        *,
        clock: Callable[[], float] = time.time,
        trust: TrustFeed | None = None,
    ) -> None:
        self._decode = decode
        self._state = state
        self._metrics = metrics
        self._load = load
        self._clock = clock
        self._trust = trust

    def examine(
        self, value: bytes | None, key: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection:
        state, m = self._state, self._metrics
        if partition not in state.partitions:
            self._load(partition, offset)
        decoded = decode_message(self._decode, value)
        if isinstance(decoded, Rejection):
            if state.undecodable(partition, offset):
                m.undecodable.inc()
            else:
                m.reread.inc()
            return ConsumedTurn(_UNDECODABLE, IN_ORDER, topic, partition, offset)
        now = self._clock()
        try:
            outcome, breaches = state.observe(partition, offset, key, value or b"",
                                              event=decoded.event, now=now)
        except (KeyError, TypeError, ValueError):
            state.undecodable(partition, offset)
            m.undecodable.inc()
            return ConsumedTurn(_UNDECODABLE, IN_ORDER, topic, partition, offset)
        if self._trust is not None and outcome not in ("reread", "legacy"):
            self._trust.observe(partition, decoded.event, value or b"", now)
        _count(m, outcome, breaches)
        return ConsumedTurn(decoded, IN_ORDER, topic, partition, offset)

    def forget_partitions(self, partitions: set[int]) -> None:
        return  # the sink forgets the state (it was checkpointed at the last flush)


def _count(m: FollowMetrics, outcome: Outcome, breaches: list[str]) -> None:
    """A message's outcome and breaches on the metrics."""
    if outcome == "reread":
        m.reread.inc()
    elif outcome in ("new", "late", "legacy"):
        m.proved.inc()
        if outcome == "late":
            m.late.inc()
    elif outcome == "duplicate":
        m.duplicates.inc()
    else:
        if outcome == "chain":
            m.proved.inc()
        m.chain_breaks.labels(outcome).inc()
    for contract in breaches:
        m.breaches.labels(contract).inc()


class VerifyFollowSink(Sink):
    """Checkpoints the proof at every flush; offsets are stored only after it is durable."""

    # Nothing is rejected (the validation never does); no redelivery marking either.
    marks_redeliveries = False

    def __init__(
        self,
        kafka: KafkaSettings,
        state: FollowState,
        metrics: FollowMetrics,
        *,
        clock: Callable[[], float] = time.time,
        flush_timeout_s: float = 30.0,
        trust: TrustFeed | None = None,
    ) -> None:
        self._kafka = kafka
        self._state = state
        self._metrics = metrics
        self._clock = clock
        self._topic = verify_state_topic(kafka)
        self._producer = KafkaProducer.reliable(kafka).open()
        self._pending: list[tuple[bytes, bytes | None]] = []
        self._flush_timeout_s = flush_timeout_s
        self._trust = trust
        if trust is not None:
            trust.start(read_state(kafka))  # what was proved, then the reader from there

    # -- taking a partition over ---------------------------------------------------------
    def load(self, partition: int, first_offset: int) -> None:
        """The partition's checkpoint, read back before its first message is checked."""
        records = list(read_state(self._kafka))
        low = watermarks(self._kafka, self._kafka.topics.turn_events).low.get(partition, 0)
        mode = self._state.load_partition(partition, first_offset=first_offset, log_start=low,
                                          records=records)
        proof = self._state.partitions[partition]
        log.info("verify_partition_loaded", partition=partition, mode=mode,
                 proved_offset=proof.next_offset, first_offset=first_offset, log_start=low)

    # -- the runtime's hooks -------------------------------------------------------------
    def take(self, turn: ConsumedTurn) -> None:
        return  # checked in the validation already

    def flush(self) -> None:
        self._pending += self._state.checkpoint()
        if self._trust is not None:
            self._pending += self._trust.checkpoint()
        if not self._pending:
            return
        for key, value in self._pending:
            self._producer.produce(self._topic, value, key)
        if self._producer.flush(self._flush_timeout_s):
            raise BrokerError(f"checkpoint not durable on {self._topic}")
        self._pending = []
        self._metrics.checkpoints.inc()
        self._export()

    def tick(self) -> None:
        now = self._clock()
        newly = self._state.sweep(now)
        if newly:
            self._metrics.lost.inc(newly)
            log.warning("verify_turns_lost", positions=newly, grace_s=self._state.grace_s)
            self.flush()  # what was declared lost is checkpointed now, not at the next batch
        within, overdue = self._state.missing(now)
        self._metrics.missing.labels("within_grace").set(within)
        self._metrics.missing.labels("overdue").set(overdue)
        if self._trust is not None:
            times = {p: proof.event_time_ms for p, proof in self._state.partitions.items()}
            if self._trust.sweep(times):
                self.flush()  # what was judged is checkpointed now, not at the next batch

    def partitions_revoked(self, partitions: set[int]) -> None:
        self._state.forget(partitions)
        for p in partitions:
            for gauge in (self._metrics.proved_offset, self._metrics.proved_time):
                with contextlib.suppress(KeyError):  # nothing proved there yet
                    gauge.remove(str(p))

    def close(self) -> None:
        if self._trust is not None:
            self._trust.stop()
        self._producer.flush(self._flush_timeout_s)

    def _export(self) -> None:
        m, state = self._metrics, self._state
        m.streams.labels("open").set(len(state.streams))
        m.streams.labels("began_before_retention").set(
            sum(p.counts.began_before_retention for p in state.partitions.values()))
        for p, proof in state.partitions.items():
            m.proved_offset.labels(str(p)).set(proof.next_offset)
            if proof.event_time_ms:
                m.proved_time.labels(str(p)).set(proof.event_time_ms / 1000)


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
        self._thread = threading.Thread(target=self._run, name="verify-checkpoints",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    # -- the loop's side ---------------------------------------------------------------
    def observe(self, partition: int, event: Mapping[str, object], value: bytes,
                now: float) -> None:
        producer = event.get("producer_id") or LEGACY_PRODUCER
        sequence = event.get("sequence")
        if producer == LEGACY_PRODUCER or not isinstance(sequence, int):
            return
        # The grace runs from arrival, not occurred_at: a turn published late (spooled)
        # is still signed within the publisher's interval of being handed on.
        with self._lock:
            self._trust.observe((str(event["session_id"]), str(producer)), partition,
                                sequence, chain_hash(value), int(now * 1000))

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
            log.error("verify_forgery", reason=forgery.reason, session_id=session,
                      producer_id=producer, detail=forgery.detail)
        return bool(found)

    # -- the reader thread ----------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._read()
            except Exception as exc:  # any failure: logged, the reader starts over from
                # the offsets taken (nothing is judged unsigned past what it has read)
                log.warning("verify_checkpoints_unreadable", topic=self._topic,
                            error=repr(exc))
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
                        self._take(record.partition() or 0, record.offset() or 0,
                                   record.value(), record.timestamp())
                    self._export()
                if not records and self._clock() - checked >= self._idle_check_s:
                    checked = self._clock()
                    self._caught_up(checked)
        finally:
            consumer.close()

    def _take(self, partition: int, offset: int, value: bytes | None,
              stamp: tuple[int, int]) -> None:
        self._trust.read_to(partition, offset + 1)
        checkpoint = decode_checkpoint(value)
        if checkpoint is None:
            return  # a tombstone, or not a checkpoint: one-shot verify counts those
        kind, at = stamp
        verdict = self._trust.take_checkpoint(checkpoint, at if kind == LOG_APPEND_TIME
                                              else None)
        self._metrics.signed_checkpoints.labels(
            "valid" if verdict.problem is None else "invalid").inc()

    def _caught_up(self, asked: float) -> None:
        """Every checkpoint appended before ``asked`` is read: the horizon moves there."""
        marks = watermarks(self._kafka, self._topic)
        with self._lock:
            done = all(self._trust.reader_offsets.get(p, marks.low.get(p, 0)) >= high
                       for p, high in marks.high.items())
            if done:
                self._horizon_ms = int(asked * 1000)
                self._metrics.checkpoints_read_to.set(asked)
