"""The follower's trust feed: a thread reading ``<prefix>checkpoints`` beside the loop that
holds the turns to the signed heads, both under one lock (``turnaudit.verify.follow_trust``
judges; this module feeds it and exports its counts).

One judge per turn partition this member reads, taken over with the partition from that
partition's trust records and dropped when it is revoked: each worker of the group reads
every checkpoint but keeps the heads of its own partitions' streams only. A judge taken
over behind the reader (its trust records were written at an earlier checkpoint offset)
sends the reader back to its offset, and a batch in flight then is taken by no judge (read
again): each judge reads each producer's chain on from where it stopped, never from the
middle of a batch, and takes a checkpoint once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

import structlog

from turnaudit.checkpoint_chain import RetentionStart
from turnaudit.checkpoints import Keyring, decode_checkpoint
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.identity import LEGACY_PRODUCER, StreamId, chain_hash
from turnaudit.kafka.consumer import READER, KafkaConsumer
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.partitioning import session_partition
from turnaudit.kafka.topics import topic_retention_ms
from turnaudit.settings import KafkaSettings
from turnaudit.verify.follow_trust import FollowTrust
from turnaudit.verify.follow_trust_findings import GAUGE_STATES, GaugeState
from turnaudit.verify.kafka_reads import LOG_APPEND_TIME

log = structlog.get_logger("turnaudit.verify.follow")

# A judge for turn partition P (its scope), judging the streams ``owns`` places there.
JudgeFactory = Callable[[int], FollowTrust]
# A record of the checkpoints topic: partition, offset, value, (timestamp type, timestamp).
CheckpointRecord = tuple[int, int, bytes | None, tuple[int, int]]


class TrustFeed:
    """The follower's trust state, one judge per turn partition read, shared by the loop
    (turns, sweep, checkpoint, partitions taken and revoked) and the thread that reads
    ``<prefix>checkpoints`` (under one lock); its metrics."""

    def __init__(
        self,
        kafka: KafkaSettings,
        judge: JudgeFactory,
        metrics: FollowMetrics,
        *,
        clock: Callable[[], float] = time.time,
        idle_check_s: float = 1.0,
    ) -> None:
        self._kafka = kafka
        self._judge = judge
        self._metrics = metrics
        self._clock = clock
        self._idle_check_s = idle_check_s
        self._topic = kafka.topics.checkpoints
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.judges: dict[int, FollowTrust] = {}  # by turn partition
        self._behind = False  # a judge was taken over behind the reader: read again
        self._horizon_ms: int | None = None  # every checkpoint written before it is read
        self._exported = 0.0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="verify-checkpoints", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    # -- partitions taken over and revoked -------------------------------------------
    def take_partition(self, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Judge ``partition``'s streams from its trust records (the state partition's)."""
        judge = self._judge(partition)
        judge.load(records)
        with self._lock:
            self.judges[partition] = judge
            self._behind = True  # the reader goes back to where this judge stopped
            self._horizon_ms = None  # nothing is late before the new judge has caught up
            self._export(force=True)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        with self._lock:
            for p in partitions:
                self.judges.pop(p, None)
            self._export(force=True)

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
        stream: StreamId = (str(event["session_id"]), str(producer))
        # The grace runs from arrival, not occurred_at: a turn published late (spooled)
        # is still signed within the publisher's interval of being handed on.
        with self._lock:
            judge = self.judges.get(partition)
            if judge is None:
                return  # not this member's partition (any more)
            judge.observe(
                stream,
                partition,
                sequence,
                chain_hash(value, fingerprint),
                int(now * 1000),
                schema="" if fingerprint is None else fingerprint.hex(),
            )

    def retire(self, partition: int, stream: StreamId) -> None:
        """The proof retired the stream (``FollowTrust.retire``)."""
        with self._lock:
            judge = self.judges.get(partition)
            if judge is not None:
                judge.retire(stream)

    def sweep(self, event_time_ms: Mapping[int, int]) -> bool:
        """Judge what the grace has run out on; True when the trust state changed (the
        reader took checkpoints, a stream was judged) and is to be checkpointed."""
        with self._lock:
            changed = False
            for judge in self.judges.values():
                judge.sweep(horizon_ms=self._horizon_ms, event_time_ms=event_time_ms)
                changed = judge.changed() or changed
            self._export()
            return changed

    def checkpoint(self) -> list[tuple[int, bytes, bytes | None]]:
        """(turn partition, key, value) of what changed, each judge's in its partition."""
        with self._lock:
            return [
                (p, key, value)
                for p, judge in sorted(self.judges.items())
                for key, value in judge.checkpoint()
            ]

    def _export(self, *, force: bool = False) -> bool:
        """Metrics from the state (under the lock; the gauges at most once a second: they
        count every stream); True when a forgery was found."""
        m = self._metrics
        found = [f for judge in self.judges.values() for f in judge.found()]
        now = self._clock()
        if force or found or now - self._exported >= 1.0:  # a forgery shows at once
            self._exported = now
            totals: dict[GaugeState, int] = dict.fromkeys(GAUGE_STATES, 0)
            for judge in self.judges.values():
                for state, n in judge.by_status().items():
                    totals[state] += n
            for state, n in totals.items():
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

    def begin(self, low: Mapping[int, int]) -> dict[int, int] | None:
        """Where a reading of the checkpoints partitions (``low``: each one's log start)
        begins: the least offset a judge has read to; None while no judge is held. A
        judge taken over after this reading began sends the reader back (``take_batch``)."""
        with self._lock:
            self._behind = False
            if not self.judges:
                return None
            return {
                p: min(j.reader_offsets.get(p, start) for j in self.judges.values())
                for p, start in low.items()
            }

    def take_batch(self, records: Iterable[CheckpointRecord]) -> bool:
        """Records a reading consumed, in order, each judge taking those past its offset;
        False, with none taken, when a judge was taken over since the reading began: that
        judge must read its producers' chains from where it stopped, not from the middle
        of this batch (it would find each chain broken), so the reading begins again."""
        with self._lock:
            if self._behind:
                return False
            for partition, offset, value, stamp in records:
                self._take(partition, offset, value, stamp)
            self._export()
            return True

    def _read(self) -> None:
        marks = watermarks(self._kafka, self._topic)
        starts = self.begin({p: marks.low.get(p, 0) for p in marks.high})
        if starts is None:  # no partition of the turn topic is this member's yet
            self._stop.wait(0.5)
            return
        consumer = KafkaConsumer(self._kafka, self._topic, READER)
        try:
            consumer.assign(starts)
            checked = 0.0
            while not self._stop.is_set():
                records = consumer.consume(500, 0.5)
                batch = [
                    (r.partition() or 0, r.offset() or 0, r.value(), r.timestamp()) for r in records
                ]
                if not self.take_batch(batch):
                    return  # a judge taken over behind the reader: start again there
                if not records and self._clock() - checked >= self._idle_check_s:
                    checked = self._clock()
                    self._caught_up(checked)
        finally:
            consumer.close()

    def _take(
        self, partition: int, offset: int, value: bytes | None, stamp: tuple[int, int]
    ) -> None:
        checkpoint = decode_checkpoint(value)
        kind, at = stamp
        for judge in self.judges.values():
            if offset < judge.reader_offsets.get(partition, 0):
                continue  # this judge took it already
            judge.read_to(partition, offset + 1)
            if checkpoint is None:
                continue  # a tombstone, or not a checkpoint: one-shot verify counts those
            verdict = judge.take_checkpoint(checkpoint, at if kind == LOG_APPEND_TIME else None)
            if judge.reports_checkpoints:
                self._metrics.signed_checkpoints.labels(
                    "valid" if verdict.problem is None else "invalid"
                ).inc()

    def _caught_up(self, asked: float) -> None:
        """Every checkpoint appended before ``asked`` is read: the horizon moves there."""
        marks = watermarks(self._kafka, self._topic)
        with self._lock:
            done = bool(self.judges) and all(
                judge.reader_offsets.get(p, marks.low.get(p, 0)) >= high
                for judge in self.judges.values()
                for p, high in marks.high.items()
            )
            if done:
                self._horizon_ms = int(asked * 1000)
                self._metrics.checkpoints_read_to.set(asked)


def partition_judges(kafka: KafkaSettings, keyring: Keyring, *, grace_s: float) -> JudgeFactory:
    """Judges of the turn partitions: each keeps the heads of the streams the publisher's
    partitioner places in its partition (the turn topic's partition count read when a
    partition is taken over); partition 0's reports invalid checkpoints."""

    def judge(partition: int) -> FollowTrust:
        count = max(1, len(watermarks(kafka, kafka.topics.turn_events).high))

        def owns(stream: StreamId) -> bool:
            return session_partition(stream[0], count) == partition

        # A chain may resume past checkpoints retention removed (older than the turns').
        retention_ms = topic_retention_ms(kafka, kafka.topics.turn_events)
        return FollowTrust(
            keyring,
            grace_s=grace_s,
            scope=partition,
            owns=owns,
            reports_checkpoints=partition == 0,
            start=RetentionStart(retention_ms, lambda: int(time.time() * 1000)),
        )

    return judge
