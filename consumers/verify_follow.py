"""``turnaudit verify --follow``: a consumer service that keeps proving the stream.

It runs on the consumer runtime like the other services (its own group, static
membership, health, ``/metrics``, ``--workers N``). Its validation checks every
message as it arrives against the proof so far (``turnaudit.verify.follow``:
present once, chained, in order, late arrivals closing gaps) and never
dead-letters (the other services do); its sink writes, at every flush, the
proof of what changed to the compacted ``<prefix>verify-state`` topic and
returns only once it is durable, so the offsets the runtime then stores never
pass the checkpoint (at-least-once, and they agree). A partition taken over
(at start, or after a rebalance) is loaded from its checkpoint when assigned (a
partition never checkpointed, at its first message); messages below its proved
offset are skipped (counted ``reread``), so a restart resumes where the proof
stopped, and one that reads no new turn still sweeps and retires.

With a keyring (``--keyring FILE``) it also judges each stream's trust against the
signed checkpoints (``turnaudit.verify.follow_trust``): a thread of its own reads
``<prefix>checkpoints`` from where the checkpointed trust state stopped, each checkpoint
judged as it is read; the turns are held to the signed heads as they arrive. The trust
state is kept per turn partition (its streams, the last valid checkpoint per producer,
how far the checkpoints topic was read), checkpointed in the same flush as the proof and
taken over with the partition, so ``--workers N`` and members on other machines split it
as they split the partitions.

Metrics (every label value from a closed set): ``turnaudit_verify_*``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from turnaudit.consumers.runtime import ConsumedTurn, Sink, Validation
from turnaudit.consumers.runtime.handover import HandedBatch
from turnaudit.consumers.runtime.sink import IN_ORDER, Rejection
from turnaudit.consumers.runtime.validation import decode_message
from turnaudit.consumers.verify_follow_heads import HeadsFeed
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.consumers.verify_follow_trust import TrustFeed
from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.producer import REPORT_ONLY_ERRORS, KafkaProducer
from turnaudit.kafka.state_topic import read_state, state_partitions
from turnaudit.records import Record
from turnaudit.serialization.wire import DecodedTurnEvent, Framing, TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.follow import FollowState
from turnaudit.verify.follow_batch import follow_batch
from turnaudit.verify.follow_records import Outcome, StateRecord, partition_key

log = structlog.get_logger("turnaudit.verify.follow")

DEFAULT_CHECKPOINT_INTERVAL_S = 5.0

_UNDECODABLE = DecodedTurnEvent({}, 0, Framing.SINGLE_OBJECT, "")


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
        fingerprint = self._decode.writer_fingerprint(decoded)
        try:
            outcome, breaches = state.observe(
                partition,
                offset,
                key,
                value or b"",
                event=decoded.event,
                now=now,
                fingerprint=fingerprint,
            )
        except (KeyError, TypeError, ValueError):
            state.undecodable(partition, offset)
            m.undecodable.inc()
            return ConsumedTurn(_UNDECODABLE, IN_ORDER, topic, partition, offset)
        if self._trust is not None and outcome != "reread":  # v1/v2 turns are judged too
            self._trust.observe(partition, decoded.event, value or b"", now, fingerprint)
        _count(m, outcome, breaches)
        return ConsumedTurn(decoded, IN_ORDER, topic, partition, offset)

    def examine_batch(self, records: Sequence[Record]) -> HandedBatch | None:
        """The batch through verify's native step (not with a keyring: the trust state
        keeps each turn's hash, message by message)."""
        state = self._state
        if self._trust is not None or state.step is None:
            return None
        batch = HandedBatch()
        # Natively, one pass: the messages with a position (only librdkafka's error events
        # lack one), and per partition its first offset and the offset after its last.
        # The step keeps what it read of each for admitting the list it returned.
        placed, met = state.step.positions(records)
        for partition, (first, after) in met.items():
            if partition not in state.partitions:
                self._load(partition, first)
            batch.next_offsets[partition] = after
        followed = follow_batch(state, placed, self._clock())
        m = self._metrics
        m.proved.inc(followed.settled)
        if followed.reread:
            m.reread.inc(followed.reread)
        for outcome, breaches in followed.outcomes:
            _count(m, outcome, breaches)
        batch.handed = len(placed)
        return batch

    def forget_partitions(self, partitions: set[int]) -> None:
        return  # the sink forgets the state (it was checkpointed at the last flush)


def _count(m: FollowMetrics, outcome: Outcome, breaches: list[str]) -> None:
    """A message's outcome and breaches on the metrics."""
    if outcome == "reread":
        m.reread.inc()
    elif outcome == "undecodable":
        m.undecodable.inc()
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
    """Checkpoints the proof every ``checkpoint_interval_s`` (and at once when a loss or a
    trust judgement is declared); the offsets the runtime stores are held at the last
    durable checkpoint, so they never pass it. A restart re-reads at most an interval's
    turns (as a Kafka Streams commit interval does); a checkpoint written per batch cost a
    record per stream placed and a round trip to the broker each time."""

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
        checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
        trust: TrustFeed | None = None,
        heads: HeadsFeed | None = None,
    ) -> None:
        self._kafka = kafka
        self._state = state
        self._metrics = metrics
        self._clock = clock
        self._heads = heads
        self._topic = kafka.topics.verify_state
        self._state_partitions = state_partitions(kafka)
        # A checkpoint writes a record per stream placed into: only a failed delivery is
        # reported (to Python), the successes are not called back one by one.
        only_errors: dict[str, Any] = {REPORT_ONLY_ERRORS: True}
        self._producer = KafkaProducer.reliable(kafka, **only_errors).open()
        self._pending: list[StateRecord] = []
        # A partition's state records read when it was assigned, kept for its first message.
        self._assigned_records: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self._flush_timeout_s = flush_timeout_s
        self._interval_s = checkpoint_interval_s
        self._monotonic = monotonic
        self._checkpointed_at = monotonic()
        # Per partition, the next offset the last durable checkpoint proved to: the runtime
        # stores no offset past it.
        self._durable: dict[int, int] = {}
        self._trust = trust
        if trust is not None:
            trust.start()  # the reader, from where each partition's trust stopped
        if heads is not None:
            heads.start()

    # -- taking a partition over ---------------------------------------------------------
    def partitions_assigned(self, partitions: set[int]) -> None:
        """Each partition's checkpoint is read at once. A checkpointed partition is loaded
        now, whether or not a turn of it comes again: its open gaps are swept, its streams
        that ended whole retired, its losses judged. One never checkpointed waits for its
        first message (where reading begins says how its proof began). With a keyring, its
        trust is taken over at once too (judged as checkpoints arrive)."""
        for p in sorted(partitions - set(self._state.partitions)):  # held: memory is newer
            records = list(read_state(self._kafka, [p]))
            if self._trust is not None and p not in self._trust.judges:  # held: newer
                self._trust.take_partition(p, records)
            proof = dict(records).get(partition_key(p))
            if proof is not None:
                self.load(p, json.loads(proof)["offset"], records)
            else:
                self._assigned_records[p] = records

    def load(
        self,
        partition: int,
        first_offset: int,
        records: list[tuple[bytes, bytes | None]] | None = None,
    ) -> None:
        """The partition's checkpoint, read back before its first message is checked."""
        if records is None:
            records = self._assigned_records.pop(partition, None)
        if records is None:
            records = list(read_state(self._kafka, [partition]))
        low = watermarks(self._kafka, self._kafka.topics.turn_events).low.get(partition, 0)
        mode = self._state.load_partition(
            partition, first_offset=first_offset, log_start=low, records=records
        )
        if self._trust is not None and partition not in self._trust.judges:
            self._trust.take_partition(partition, records)
        proof = self._state.partitions[partition]
        self._durable[partition] = proof.next_offset  # what its checkpoint (or nothing) proved
        log.info(
            "verify_partition_loaded",
            partition=partition,
            mode=mode,
            proved_offset=proof.next_offset,
            first_offset=first_offset,
            log_start=low,
        )

    # -- the runtime's hooks -------------------------------------------------------------
    def take(self, turn: ConsumedTurn) -> None:
        return  # checked in the validation already

    def flush(self) -> None:
        """After a batch: a checkpoint once the interval passed (the batch's proof is in
        memory meanwhile, and its offsets held)."""
        if self._monotonic() - self._checkpointed_at >= self._interval_s:
            self.checkpoint()
        else:
            self._export()  # the gauges follow the proof, checkpointed or not

    def held_offsets(self) -> dict[int, int]:
        return dict(self._durable)

    def checkpoint(self) -> None:
        """What changed since the last checkpoint, written and durable before returning."""
        if self._heads is not None:  # about no one partition; first: it retires streams
            # (ended whole, covered by judged-to marks written before), whose tombstones
            # the state's records then carry
            self._pending += [(None, key, value) for key, value in self._heads.checkpoint()]
        self._pending += self._state.checkpoint()
        if self._trust is not None:
            self._pending += self._trust.checkpoint()
        if self._pending:
            # Each state partition's records in one call, in order (the latest per key wins).
            by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
            count = self._state_partitions
            for about, key, value in self._pending:
                by_partition.setdefault(0 if about is None else about % count, []).append(
                    (key, value)
                )
            for where, records in by_partition.items():
                self._producer.produce_batch(self._topic, records, partition=where)
            if self._producer.flush(self._flush_timeout_s):
                raise BrokerError(f"checkpoint not durable on {self._topic}")
            self._pending = []
            self._metrics.checkpoints.inc()
            self._export()
        self._checkpointed_at = self._monotonic()
        for p, proof in self._state.partitions.items():
            self._durable[p] = proof.next_offset

    def tick(self) -> None:
        now = self._clock()
        newly = self._state.sweep(now)
        if newly:
            self._metrics.lost.labels("gap").inc(newly)
            log.warning("verify_turns_lost", positions=newly, grace_s=self._state.grace_s)
            self.checkpoint()  # what was declared lost is checkpointed now
        within, overdue = self._state.missing(now)
        self._metrics.missing.labels("within_grace").set(within)
        self._metrics.missing.labels("overdue").set(overdue)
        if self._trust is not None:
            times = {p: proof.event_time_ms for p, proof in self._state.partitions.items()}
            if self._trust.sweep(times):
                self.checkpoint()  # what was judged is checkpointed now
        if self._heads is not None and self._heads.sweep():
            self.checkpoint()  # crash and vanished losses counted: checkpointed now
        self.flush()  # idle: what the last batches proved is checkpointed within the interval

    def partitions_revoked(self, partitions: set[int]) -> None:
        self._state.forget(partitions)
        for p in partitions:
            self._assigned_records.pop(p, None)
            self._durable.pop(p, None)
        if self._trust is not None:
            self._trust.drop_partitions(partitions)
        for p in partitions:
            for gauge in (self._metrics.proved_offset, self._metrics.proved_time):
                with contextlib.suppress(KeyError):  # nothing proved there yet
                    gauge.remove(str(p))

    def close(self) -> None:
        if self._trust is not None:
            self._trust.stop()
        if self._heads is not None:
            self._heads.stop()
        self._producer.flush(self._flush_timeout_s)
        self._state.close()

    def _export(self) -> None:
        m, state = self._metrics, self._state
        m.streams.labels("open").set(state.streams_held())
        m.streams.labels("began_before_retention").set(
            sum(p.counts.began_before_retention for p in state.partitions.values())
        )
        for p, proof in state.partitions.items():
            m.proved_offset.labels(str(p)).set(proof.next_offset)
            if proof.event_time_ms:
                m.proved_time.labels(str(p)).set(proof.event_time_ms / 1000)
