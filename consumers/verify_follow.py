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

Metrics (every label value from a closed set): ``turnaudit_verify_*``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from turnaudit.consumers.runtime import ConsumedTurn, Sink, Validation
from turnaudit.consumers.runtime.sink import IN_ORDER, Rejection
from turnaudit.consumers.runtime.validation import decode_message
from turnaudit.contracts import Contract
from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.kafka.state_topic import read_state, verify_state_topic
from turnaudit.serialization.wire import DecodedTurnEvent, Framing, TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.follow import CHAIN_KINDS, FollowState

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
        for kind in CHAIN_KINDS:
            self.chain_breaks.labels(kind)
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._decode = decode
        self._state = state
        self._metrics = metrics
        self._load = load
        self._clock = clock

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
        try:
            outcome, breaches = state.observe(partition, offset, key, value or b"",
                                              event=decoded.event, now=self._clock())
        except (KeyError, TypeError, ValueError):
            state.undecodable(partition, offset)
            m.undecodable.inc()
            return ConsumedTurn(_UNDECODABLE, IN_ORDER, topic, partition, offset)
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
        return ConsumedTurn(decoded, IN_ORDER, topic, partition, offset)

    def forget_partitions(self, partitions: set[int]) -> None:
        return  # the sink forgets the state (it was checkpointed at the last flush)


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
    ) -> None:
        self._kafka = kafka
        self._state = state
        self._metrics = metrics
        self._clock = clock
        self._topic = verify_state_topic(kafka)
        self._producer = KafkaProducer.reliable(kafka).open()
        self._pending: list[tuple[bytes, bytes | None]] = []
        self._flush_timeout_s = flush_timeout_s

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

    def partitions_revoked(self, partitions: set[int]) -> None:
        self._state.forget(partitions)
        for p in partitions:
            for gauge in (self._metrics.proved_offset, self._metrics.proved_time):
                with contextlib.suppress(KeyError):  # nothing proved there yet
                    gauge.remove(str(p))

    def close(self) -> None:
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
