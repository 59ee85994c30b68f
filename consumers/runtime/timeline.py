"""A batch timeline: where each batch's time went, to explain a slow delay with evidence.

Off by default; a ``ConsumerService`` given a ``BatchTimeline`` marks every batch:
when its poll returned and how long the poll waited, how many records, how old the
oldest of them was on arrival (its Kafka timestamp against the wall clock), the time
in validation and hand-over, in the sink's flush (with dead letters settled), in storing
offsets, how long the loop was away from polling before it (the previous batch and the
tick), the collector's pauses since the previous mark (``gc.callbacks``), and the
thread's own CPU time and preemptions (``getrusage``), which tell working from waiting. A turn's
delay is its age on arrival plus the service's time on it: the marks say which of the two
made a slow turn slow, and, of the age on arrival, how much was the loop not polling.
"""

from __future__ import annotations

import gc
import json
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from turnaudit.records import Record

# The phases of one batch the loop marks, in order.
EXAMINED, FLUSHED, STORED = "examined", "flushed", "stored"
PHASES = (EXAMINED, FLUSHED, STORED)


@dataclass(frozen=True, slots=True)
class BatchMark:
    """One batch of the loop, timed (seconds unless named otherwise)."""

    polled_at: float  # wall clock (epoch seconds) when the poll returned
    poll_s: float  # time inside the poll (waiting for the broker, fetching)
    away_s: float  # from the previous poll's return to this poll's call: the loop busy
    size: int  # records in the batch
    oldest_age_ms: float  # the batch's oldest record timestamp, against polled_at
    examined_s: float  # validation and hand-over to the sink
    flushed_s: float  # the sink's flush and the dead letters settled
    stored_s: float  # offsets stored (the ledger and the client)
    gc_s: float  # the collector's pauses since the previous mark
    gc_runs: int
    gc_oldest_generation: int  # the oldest generation collected since the previous mark (-1: none)
    # This thread's CPU time away from polling and over the three phases: far below the
    # wall time, the thread was waiting (for a CPU, or the GIL), not working.
    away_cpu_s: float
    work_cpu_s: float
    preempted: int  # times the kernel took the CPU from this thread since the previous mark
    blocked: int  # times this thread gave the CPU up to wait (a poll, a lock, the GIL, I/O)


def _switches() -> tuple[int, int]:
    """Involuntary and voluntary context switches of the calling thread so far."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_nivcsw, usage.ru_nvcsw


@dataclass(slots=True)
class _OpenBatch:
    """The batch in hand: its mark as far as it got."""

    polled_at: float
    poll_s: float
    away_s: float
    size: int
    oldest_age_ms: float
    gc_s: float
    gc_runs: int
    gc_oldest_generation: int
    away_cpu_s: float
    preempted: int
    blocked: int
    work_cpu_s: float = 0.0
    examined_s: float = 0.0
    flushed_s: float = 0.0
    stored_s: float = 0.0


def oldest_timestamp_ms(records: Sequence[Record]) -> int | None:
    """The smallest Kafka timestamp of the records (None: none carries one)."""
    stamps = [ms for r in records if (ms := r.timestamp()[1]) is not None and ms >= 0]
    return min(stamps) if stamps else None


class BatchTimeline:
    """Marks of every batch a service handled, and the collector's pauses between them."""

    def __init__(
        self,
        *,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.perf_counter,
        thread_clock: Callable[[], float] = time.thread_time,
        switches: Callable[[], tuple[int, int]] = _switches,
    ) -> None:
        self.marks: list[BatchMark] = []
        self._wall, self._clock = wall_clock, clock
        self._thread_clock, self._switches = thread_clock, switches
        self._last_return_cpu = 0.0
        self._poll_called_cpu = 0.0
        self._work_started_cpu = 0.0
        self._switches_before = (0, 0)
        self._gc_started: float | None = None
        self._gc_s, self._gc_runs, self._gc_generation = 0.0, 0, -1
        self._last_return: float | None = None
        self._poll_called = 0.0
        self._batch: _OpenBatch | None = None
        self._lap_at = 0.0

    # -- the collector --------------------------------------------------------------
    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = self._clock()
        elif self._gc_started is not None:
            self._gc_s += self._clock() - self._gc_started
            self._gc_runs += 1
            self._gc_generation = max(self._gc_generation, info.get("generation", -1))
            self._gc_started = None

    def start(self) -> None:
        """Watches the collector (the loop calls it when it starts)."""
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    # -- one poll and its batch --------------------------------------------------------
    def polling(self) -> None:
        """The loop is about to poll."""
        self._poll_called = self._clock()
        self._poll_called_cpu = self._thread_clock()

    def polled(self, records: Sequence[Record]) -> None:
        """The poll returned these records (a batch follows)."""
        now = self._clock()
        cpu = self._thread_clock()
        wall = self._wall()
        switches = self._switches()
        oldest = oldest_timestamp_ms(records)
        gc_s, gc_runs, generation = self._gc_s, self._gc_runs, self._gc_generation
        self._gc_s, self._gc_runs, self._gc_generation = 0.0, 0, -1
        first = self._last_return is None
        away = 0.0 if self._last_return is None else self._poll_called - self._last_return
        away_cpu = 0.0 if first else self._poll_called_cpu - self._last_return_cpu
        self._last_return, self._last_return_cpu, self._work_started_cpu = now, cpu, cpu
        before, self._switches_before = self._switches_before, switches
        self._batch = _OpenBatch(
            polled_at=wall,
            poll_s=now - self._poll_called,
            away_s=away,
            size=len(records),
            oldest_age_ms=-1.0 if oldest is None else wall * 1000 - oldest,
            gc_s=gc_s,
            gc_runs=gc_runs,
            gc_oldest_generation=generation,
            away_cpu_s=away_cpu,
            preempted=0 if first else switches[0] - before[0],
            blocked=0 if first else switches[1] - before[1],
        )
        self._lap_at = now

    def lap(self, phase: str) -> None:
        """The batch in hand finished ``phase`` (one of ``PHASES``)."""
        if self._batch is None:
            return
        now = self._clock()
        setattr(self._batch, f"{phase}_s", now - self._lap_at)
        self._lap_at = now
        if phase == STORED:
            self._close()

    def abandoned(self) -> None:
        """The batch in hand stopped before its offsets were stored (shutdown, a sink
        that failed to report what it holds): marked with what it reached."""
        self._close()

    def _close(self) -> None:
        if self._batch is not None:
            self._batch.work_cpu_s = self._thread_clock() - self._work_started_cpu
            self.marks.append(BatchMark(**asdict(self._batch)))
            self._batch = None

    def write(self, path: Path) -> None:
        """The marks as JSON lines, one batch a line, in the order handled."""
        with path.open("w", encoding="utf-8") as out:
            for mark in self.marks:
                out.write(json.dumps(asdict(mark)) + "\n")


def read_marks(path: Path) -> list[BatchMark]:
    """What ``BatchTimeline.write`` wrote."""
    with path.open(encoding="utf-8") as lines:
        return [BatchMark(**json.loads(line)) for line in lines if line.strip()]


class Unmarked(BatchTimeline):
    """The timeline of a loop not marked: every mark a no-op (the loop is one loop)."""

    def start(self) -> None:
        return

    def stop(self) -> None:
        return

    def polling(self) -> None:
        return

    def polled(self, records: Sequence[Record]) -> None:
        return

    def lap(self, phase: str) -> None:
        return

    def abandoned(self) -> None:
        return


UNMARKED = Unmarked()
