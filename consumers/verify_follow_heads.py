"""The follower's heads feed: turns lost in a crash and with a vanished producer, live.

A thread reads ``<prefix>stream-heads`` (compacted) from its beginning and keeps following
it; after each batch that holds an announcement it takes the turn topic's watermarks, so
each announcement reaches the loop with where the turn topic stood once it was read. The
loop's ``sweep()`` (the sink's tick) hands the records to ``turnaudit.verify.heads_judge``,
which asks the state engine through callables (``EngineView``) and judges; this module
counts what it judged on the ``turnaudit_verify_*`` metrics (``cause`` crash or vanished,
the pack and runtime bounded like every pack label) and logs each stream with its ids.

A pass starts over from the beginning when the judge wants one (a partition this member
took over, a producer newly vanished whose open streams it must collect), at most every
``pass_gap_s``; what was counted comes back from the state topic at each pass
(``checkpoint()`` goes out with the sink's flush), so nothing is counted twice and nothing
waiting is lost across a restart.

The partition of a stream none of whose turns was read is where the publishers' keyed
messages go: librdkafka's ``partitioner`` of this service's own settings (default
``consistent_random``, CRC-32 of the session id; ``turnaudit.kafka.partitioner``); under a
partitioner that does not place by key, such streams are judged by the member holding
partition 0.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.kafka.consumer import BEGINNING, READER, KafkaConsumer
from turnaudit.kafka.partitioner import key_partitioner
from turnaudit.kafka.state_topic import read_state
from turnaudit.label_bounds import DEFAULT_LABEL_LIMIT, BoundedLabelSet
from turnaudit.settings import KafkaSettings
from turnaudit.stream_heads import (
    HeadAnnouncement,
    Liveness,
    decode_heads_record,
)
from turnaudit.verify.heads_judge import (
    JUDGED_PRODUCER_KEY,
    JUDGED_STREAM_KEY,
    EngineView,
    HeadsJudge,
    StreamLoss,
)
from turnaudit.verify.heads_marks import JUDGED_TO_KEY, HeadsAt

log = structlog.get_logger("turnaudit.verify.follow")

UNKNOWN = "unknown"  # the pack or runtime of an announcement written before they were
_JUDGED_KEYS = (JUDGED_STREAM_KEY.encode(), JUDGED_PRODUCER_KEY.encode(), JUDGED_TO_KEY.encode())
_RETRY_S = (2.0, 5.0, 15.0, 60.0)
# End announcements held waiting for the proof, at most (about 0.3 KB each).
MAX_WAITING = 50_000


@dataclass(frozen=True)
class _PassStart:
    judged: list[tuple[bytes, bytes | None]]  # the state topic's heads: records
    partitions: int  # of the turn topic


@dataclass(frozen=True)
class _Batch:
    records: list[tuple[HeadAnnouncement | Liveness | None, HeadsAt]]  # None: neither
    high: dict[int, int]  # the turn topic's watermarks, taken after the batch was read
    low: dict[int, int]


@dataclass(frozen=True)
class _PassEnd:
    pass


_Item = _PassStart | _Batch | _PassEnd


class HeadsFeed:
    """See the module docstring. ``start``/``stop`` the reader; ``sweep`` and ``checkpoint``
    on the loop's thread (the only one that asks the state engine)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        engine: EngineView,
        metrics: FollowMetrics,
        *,
        packs: frozenset[str] = frozenset(),
        label_limit: int = DEFAULT_LABEL_LIMIT,
        clock: Callable[[], float] = time.time,
        pass_gap_s: float = 5.0,
        budget: int = 5_000,
        max_waiting: int = MAX_WAITING,
        inbox: int = 2,
    ) -> None:
        self._kafka = kafka
        self._metrics = metrics
        self._clock = clock
        self._pass_gap_s = pass_gap_s
        self._budget = budget  # records taken per sweep: the loop polls between sweeps
        self._max_waiting = max_waiting
        self._topic = kafka.topics.stream_heads
        self._turns = kafka.topics.turn_events
        place = key_partitioner(kafka.client_options.get("partitioner"))
        if place is None:
            log.warning(
                "verify_partitioner_not_keyed",
                partitioner=kafka.client_options.get("partitioner"),
                hint="streams none of whose turns arrived are judged on partition 0's member",
            )
        self.judge = HeadsJudge(
            engine,
            (lambda session, n: place(session.encode(), n)) if place else (lambda _s, _n: 0),
        )
        self._packs = BoundedLabelSet(
            "pack", allowed=packs, limit=label_limit, setting="TURNAUDIT_METRICS_LABEL_LIMIT"
        )
        self._runtimes = BoundedLabelSet(
            "runtime", limit=label_limit, setting="TURNAUDIT_METRICS_LABEL_LIMIT"
        )
        # Reads of up to 10,000 records each: a few queued bound what waits in memory.
        self._inbox: queue.Queue[_Item] = queue.Queue(maxsize=inbox)
        self._stop = threading.Event()
        self._restart = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_pass = False
        self._pass_began = 0.0
        self._refreshed = 0.0
        self.passes = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="verify-stream-heads", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    # -- the loop's side ---------------------------------------------------------------
    def sweep(self) -> bool:
        """Take what the reader read (up to the budget), judge what the follower has proved
        far enough; True when losses were counted and are to be checkpointed at once."""
        now = self._clock()
        now_ms = int(now * 1000)
        taken = 0
        # A follower behind the topic holds each end announcement until it has proved that
        # far: past the bound it takes no more (the reader waits) until the proof catches up.
        while taken < self._budget and self.judge.waiting_ends() < self._max_waiting:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            taken += self._apply(item, now, now_ms)
        refresh = now - self._refreshed >= 1.0  # the gauges count streams: once a second
        if refresh:
            self._refreshed = now
            wanted = self.judge.refresh(now_ms)
            if wanted and not self._in_pass and now - self._pass_began >= self._pass_gap_s:
                self._pass_began = now
                self._restart.set()
        for loss in self.judge.judge():
            self._count(loss)
        m, judge = self._metrics, self.judge
        if refresh:
            m.vanished_producers.set(judge.vanished_producers())
            m.streams_at_risk.set(judge.streams_at_risk())
            m.ends_waiting.set(judge.waiting())
        # Marks and retirements go with the sink's next timed checkpoint (its interval):
        # asking for one here made the follower checkpoint every second.
        return judge.changed()

    def checkpoint(self) -> list[tuple[bytes, bytes | None]]:
        return self.judge.checkpoint()

    def _apply(self, item: _Item, now: float, now_ms: int) -> int:
        if isinstance(item, _PassStart):
            self.judge.start_pass(item.judged, item.partitions)
            self._in_pass = True
            self._pass_began = now
            self.passes += 1
            return 1
        if isinstance(item, _PassEnd):
            self._in_pass = False
            vanished = self.judge.end_pass(now_ms)
            log.info(
                "verify_stream_heads_read",
                passes=self.passes,
                partitions=self.judge.partitions,
                partitions_judged=len(self.judge.covered),
                producers=len(self.judge.liveness),
            )
            for gone in vanished:
                self._metrics.vanishings.inc()
                log.error(
                    "verify_producer_vanished",
                    producer_id=gone.producer,
                    silent_s=gone.silent_ms / 1000,
                    interval_ms=gone.interval_ms,
                    open_streams=gone.open_streams,
                )
            return 1
        last: dict[int, HeadsAt] = {}  # per stream-heads partition, the last record read
        for record, at in item.records:
            if isinstance(record, Liveness):
                self.judge.take_liveness(record, now_ms)
            elif record is not None:
                self.judge.take(record, item.high, item.low, at)
            last[at[0]] = at
        # Where the batch was read to: nothing the judge does above asks it (a mark moves
        # at the checkpoint), so it is told once a batch, not once a record.
        for at in last.values():
            self.judge.marks.read_to(at)
        return len(item.records)

    def _count(self, loss: StreamLoss) -> None:
        m = self._metrics
        if loss.cut:
            m.cut_streams.inc()
        if loss.lost:
            m.lost.labels(loss.cause).inc(loss.lost)
            pack = self._packs(loss.pack) if loss.pack else UNKNOWN
            runtime = self._runtimes(loss.runtime) if loss.runtime else UNKNOWN
            m.lost_by_pack.labels(loss.cause, pack, runtime).inc(loss.lost)
        say = log.warning if loss.lost else log.info  # a cut stream that lost nothing
        say(
            "verify_turns_lost_in_crash" if loss.cause == "crash" else "verify_turns_lost_vanished",
            session_id=loss.stream[0],
            producer_id=loss.stream[1],
            status=loss.status,
            announced=loss.announced,
            last_seen=loss.last,
            lost=loss.lost,
            partition=loss.partition,
            pack=loss.pack,
            runtime=loss.runtime,
        )

    # -- the reader thread ----------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._pass()
                failures = 0
            except Exception as exc:  # any failure: logged, a new pass from the beginning
                log.warning("verify_stream_heads_unreadable", topic=self._topic, error=repr(exc))
                self._stop.wait(_RETRY_S[min(failures, len(_RETRY_S) - 1)])
                failures += 1

    def _pass(self) -> None:
        self._restart.clear()
        judged = [(k, v) for k, v in read_state(self._kafka) if k.startswith(_JUDGED_KEYS)]
        consumer = KafkaConsumer(self._kafka, self._topic, READER)
        try:
            heads = consumer.partitions_of(self._topic)
            end = {p: consumer.watermarks_of(self._topic, p)[1] for p in heads}
            turns = consumer.partitions_of(self._turns)
            self._put(_PassStart(judged, len(turns)))
            consumer.assign(dict.fromkeys(heads, BEGINNING))
            read = dict.fromkeys(heads, 0)
            reached = False
            while not self._stop.is_set() and not self._restart.is_set():
                records = self._read(consumer, read)
                if records:
                    marks = {p: consumer.watermarks_of(self._turns, p) for p in turns}
                    low = {p: lo for p, (lo, _) in marks.items()}
                    self._put(_Batch(records, {p: hi for p, (_, hi) in marks.items()}, low))
                if not reached and self._caught_up(consumer, read, end):
                    reached = True
                    self._put(_PassEnd())
        finally:
            consumer.close()

    @staticmethod
    def _read(
        consumer: KafkaConsumer, read: dict[int, int]
    ) -> list[tuple[HeadAnnouncement | Liveness | None, HeadsAt]]:
        out: list[tuple[HeadAnnouncement | Liveness | None, HeadsAt]] = []
        # Large reads: the turn topic's watermarks are asked after each (a broker round trip).
        for msg in consumer.consume(10_000, 0.5):  # a client error raises: a new pass
            at = (msg.partition() or 0, msg.offset() or 0)
            read[at[0]] = at[1] + 1
            value = msg.value()
            out.append((decode_heads_record(value), at))
        return out

    @staticmethod
    def _caught_up(consumer: KafkaConsumer, read: dict[int, int], end: dict[int, int]) -> bool:
        """Every record before ``end`` read (the fetch position counts: the last records of
        a compacted log may be gone)."""
        if all(read.get(p, 0) >= high for p, high in end.items()):
            return True
        positions = consumer.positions(end)
        return all(positions.get(p, -1) >= high for p, high in end.items())

    def _put(self, item: _Item) -> None:
        while not self._stop.is_set():
            try:
                self._inbox.put(item, timeout=0.5)
                return
            except queue.Full:
                continue
