"""The batch timeline: each batch's phases timed on the clocks it is given, the
collector's pauses, the file it writes; and the loop marks every batch it stores."""

from __future__ import annotations

import gc
import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.events import encode, turn
from tests.support.streams import running, service_settings, wait_for
from tests.unit.consumers.test_loop_mock_cluster import FailingTwice
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.consumers.runtime.timeline import (
    EXAMINED,
    FLUSHED,
    STORED,
    UNMARKED,
    BatchMark,
    BatchTimeline,
    read_marks,
)
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames


class StampedRecord:
    """What the timeline reads of a consumed record: its Kafka timestamp."""

    def __init__(self, ms: int | None) -> None:
        self._ms = ms

    def timestamp(self) -> tuple[int, int | None]:
        return (0, None) if self._ms is None else (1, self._ms)


def ticking(steps: list[float]) -> Iterator[float]:
    """A clock that moves by the given steps, one per reading."""
    return itertools.accumulate(steps, initial=100.0)


@given(
    steps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=6, max_size=6),
    cpu_steps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=6, max_size=6),
    switches=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=2, max_size=2),
    stamps=st.lists(st.one_of(st.none(), st.integers(0, 10**12)), min_size=1, max_size=20),
    wall=st.floats(min_value=1.6e9, max_value=1.9e9),
)
def test_a_batch_mark_holds_each_phase_as_the_clock_moved_through_it(
    steps: list[float],
    cpu_steps: list[float],
    switches: list[tuple[int, int]],
    stamps: list[int | None],
    wall: float,
) -> None:
    clock, cpu_clock = ticking(steps), ticking(cpu_steps)
    counted = itertools.accumulate(
        switches, lambda a, b: (a[0] + b[0], a[1] + b[1]), initial=(7, 3)
    )
    timeline = BatchTimeline(
        wall_clock=lambda: wall,
        clock=lambda: next(clock),
        thread_clock=lambda: next(cpu_clock),
        switches=lambda: next(counted),
    )
    readings = list(itertools.accumulate(steps, initial=100.0))
    # The thread's clock is read at the poll's call (0), its return (1), the batch's end
    # (2), the next poll's call (3) and return (4), that batch's end (5).
    cpu = list(itertools.accumulate(cpu_steps, initial=100.0))
    timeline.polling()  # reading 0
    timeline.polled([StampedRecord(ms) for ms in stamps])  # 1
    for phase in (EXAMINED, FLUSHED, STORED):  # 2, 3, 4
        timeline.lap(phase)
    [mark] = timeline.marks
    assert mark.poll_s == readings[1] - readings[0]
    assert mark.away_s == 0.0  # the first poll: nothing before it
    assert mark.examined_s == readings[2] - readings[1]
    assert mark.flushed_s == readings[3] - readings[2]
    assert mark.stored_s == readings[4] - readings[3]
    assert mark.size == len(stamps)
    known = [ms for ms in stamps if ms is not None]
    assert mark.oldest_age_ms == (wall * 1000 - min(known) if known else -1.0)
    assert mark.work_cpu_s == cpu[2] - cpu[1]
    assert mark.away_cpu_s == 0.0
    assert (mark.preempted, mark.blocked) == (0, 0)  # counted from the first return on
    # The next poll: the loop was away from the first return (reading 1) to it (reading 5).
    timeline.polling()
    timeline.polled([StampedRecord(None)])
    timeline.abandoned()
    second = timeline.marks[1]
    assert second.away_s == readings[5] - readings[1]
    assert second.away_cpu_s == cpu[3] - cpu[1]
    assert second.work_cpu_s == cpu[5] - cpu[4]
    assert (second.preempted, second.blocked) == switches[0]


def test_a_batch_stopped_short_is_marked_with_the_phases_it_reached() -> None:
    timeline = BatchTimeline()
    timeline.polling()
    timeline.polled([StampedRecord(1)])
    timeline.lap(EXAMINED)
    timeline.abandoned()
    timeline.abandoned()  # nothing in hand: nothing more marked
    [mark] = timeline.marks
    assert mark.examined_s >= 0.0
    assert mark.flushed_s == 0.0
    assert mark.stored_s == 0.0


def test_collections_between_two_polls_are_on_the_second_batch_and_watching_stops() -> None:
    timeline = BatchTimeline()
    timeline.start()
    try:
        timeline.polling()
        timeline.polled([StampedRecord(1)])
        timeline.abandoned()
        gc.collect()  # a full collection while the loop is between batches
        gc.collect(0)
        timeline.polling()
        timeline.polled([StampedRecord(1)])
        timeline.abandoned()
    finally:
        timeline.stop()
    _, second = timeline.marks
    assert second.gc_runs >= 2
    assert second.gc_oldest_generation == 2
    assert second.gc_s > 0.0
    assert timeline._on_gc not in gc.callbacks
    gc.collect()
    timeline.polling()
    timeline.polled([StampedRecord(1)])
    timeline.abandoned()
    assert timeline.marks[2].gc_runs == 0  # no longer watched


def test_the_loop_unmarked_keeps_no_mark_and_watches_no_collection() -> None:
    watched = list(gc.callbacks)
    UNMARKED.start()
    UNMARKED.polling()
    UNMARKED.polled([StampedRecord(1)])
    for phase in (EXAMINED, FLUSHED, STORED):
        UNMARKED.lap(phase)
    UNMARKED.abandoned()
    assert gc.callbacks == watched
    UNMARKED.stop()
    assert UNMARKED.marks == []


_MARKS = st.builds(
    BatchMark,
    polled_at=st.floats(0, 2e9),
    poll_s=st.floats(0, 10),
    away_s=st.floats(0, 10),
    size=st.integers(0, 10_000),
    oldest_age_ms=st.floats(-1, 1e7),
    examined_s=st.floats(0, 10),
    flushed_s=st.floats(0, 10),
    stored_s=st.floats(0, 10),
    gc_s=st.floats(0, 10),
    gc_runs=st.integers(0, 100),
    gc_oldest_generation=st.integers(-1, 2),
    away_cpu_s=st.floats(0, 10),
    work_cpu_s=st.floats(0, 10),
    preempted=st.integers(0, 10_000),
    blocked=st.integers(0, 10_000),
)


@given(marks=st.lists(_MARKS, max_size=30))
def test_the_timeline_file_reads_back_as_the_marks_written(
    marks: list[BatchMark], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path: Path = tmp_path_factory.mktemp("timeline") / "marks.jsonl"
    timeline = BatchTimeline()
    timeline.marks.extend(marks)
    timeline.write(path)
    assert read_marks(path) == marks


def test_a_marked_service_marks_every_record_once_and_the_failed_flushes_in_flush() -> None:
    producer = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    brokers = producer.list_topics(timeout=10).brokers.values()
    settings = KafkaSettings(
        bootstrap_servers=",".join(f"{b.host}:{b.port}" for b in brokers),
        topics=TopicNames(f"m-{uuid.uuid4().hex[:8]}."),
    )
    events = [turn(f"s-mark-{n % 5}", n // 5) for n in range(150)]
    for event in events:
        producer.produce(settings.topics.turn_events, encode(event), event["session_id"].encode())
    producer.produce(settings.topics.turn_events, b"\x00not avro", b"s-mark-0")
    assert producer.flush(10) == 0
    sink = FailingTwice()  # the first batch's flush fails twice: 0.1 s and 0.5 s backoff
    timeline = BatchTimeline()
    service = ConsumerService(
        service_settings(settings, ServiceName.LOG_SINK, "g-mark"),
        sink,
        registry=CollectorRegistry(),
        serve_http=False,
        timeline=timeline,
    )
    with running(service):
        assert wait_for(lambda: sum(service.positions().values()) == len(events) + 1, timeout=60)
    producer.flush(5)
    assert sum(m.size for m in timeline.marks) == len(events) + 1
    assert all(m.oldest_age_ms >= 0 for m in timeline.marks)  # every record was stamped
    assert timeline.marks[0].flushed_s >= 0.6  # the retries' waits are the flush's
    assert timeline._on_gc not in gc.callbacks
