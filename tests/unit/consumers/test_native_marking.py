"""The metrics service and the log sink under ``--workers``: their ordinary turns through
the native step behind a worker's marking sink (``TallyingMarkingSink``,
``SteppingMarkingSink``), against the record-by-record path.

A worker hands a partition up to some offset and dies; its successor, a process that
never saw those turns, picks the partition up anywhere at or below it. Over any such hand-
over and any batch sizes, both paths count every turn exactly once and mark the same
turns redelivered, and the native path hands ``take`` only the batches that reach under
the floor another worker delivered to. Each example runs in a process of its own: the
delivered offsets live in prometheus' multiprocess files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TURNS = 40

SCRIPT = """
import itertools, json, pathlib, sys
from prometheus_client import CollectorRegistry
from turnaudit.consumers.log_sink import LogSink, service_logging
from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime import TurnEventValidation
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.handover import hand_over
from turnaudit.consumers.runtime.redelivery import (
    RedeliveryMarkingSink, SteppingMarkingSink, TallyingMarkingSink,
)
from turnaudit.consumers.runtime.settings import LogSinkSettings, MetricsSettings
from turnaudit.identity import TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

CATALOG = shipped_catalog()
files = itertools.count()
taken = [0]
_take = RedeliveryMarkingSink.take
def counting_take(self, turn):
    taken[0] += 1
    _take(self, turn)
RedeliveryMarkingSink.take = counting_take

class Message:
    def __init__(self, key, value, offset):
        self._key, self._value, self._offset = key, value, offset
    def error(self): return None
    def topic(self): return "t"
    def partition(self): return 0
    def offset(self): return self._offset
    def value(self): return self._value
    def key(self): return self._key
    def headers(self): return None

serialize = SingleObjectSerializer(CATALOG.version(5))
stamper = TurnStamper()
messages = []
sim = TurnRuntimeSimulator(7, schema_versions=(5,), concurrent_sessions=3)
for offset, event in enumerate(sim.events(int(sys.argv[1]))):
    stamper.stamp(event)
    value = serialize(event)
    stamper.commit(event, value)
    messages.append(Message(event["session_id"].encode(), value, offset))

def worker(topic, native):
    registry = CollectorRegistry()
    validation = TurnEventValidation(
        TurnEventDeserializer(CATALOG),
        ConsumerMetrics(registry),
        max_sessions=1000,
        start_gaps=False,  # a session the successor meets mid-way is ordinary to it
    )
    if sys.argv[4] == "metrics":
        inner = VerdictMetricsSink(MetricsSettings(), registry)
        cls = TallyingMarkingSink if native else RedeliveryMarkingSink
        counted = lambda: inner.counted
    else:  # the log sink: a line each turn, counted unless marked redelivered
        path = pathlib.Path(sys.argv[2]) / f"{topic}-{next(files)}.jsonl"  # one a worker
        inner = LogSink(LogSinkSettings(file=path), registry)
        cls = SteppingMarkingSink if native else RedeliveryMarkingSink
        def counted():
            lines = [json.loads(line) for line in path.read_text().splitlines()]
            return sum(not line["redelivered"] for line in lines)
    sink = cls(inner, topic, sys.argv[2])
    marked = [0]
    sink.on_marked = lambda n: marked.__setitem__(0, marked[0] + n)
    def reject(record, rejection):
        raise AssertionError(rejection)
    if native:
        validation.deliver_to(sink, reject)
    def run(records, size):
        for i in range(0, len(records), size):
            batch = records[i : i + size]
            if native:
                assert validation.examine_batch(batch) is not None
            else:
                hand_over(batch, validation.examine, sink.take, reject)
            sink.flush()
        return counted(), marked[0]
    return run

out = []
logging = service_logging("WARNING")  # the log sink's native lines are this chain's
logging.__enter__()
for n, (end, start, size) in enumerate(json.loads(sys.argv[3])):
    row = {}
    for native in (True, False):
        topic = f"t{n}-{native}"
        taken[0] = 0
        first, _ = worker(topic, native)(messages[:end], size)
        first_taken = taken[0]
        second, marked = worker(topic, native)(messages[start:], size)
        row[str(native)] = [first, second, marked, first_taken, taken[0] - first_taken]
    out.append(row)
print(json.dumps(out))  # the last line: the service logs on stdout
"""


@st.composite
def hand_overs(draw: st.DrawFn) -> tuple[int, int, int]:
    """(the first worker's end, its successor's start at or below it, batch size)."""
    end = draw(st.integers(1, TURNS))
    start = draw(st.integers(0, end))
    return end, start, draw(st.integers(1, 12))


def batches_reaching_under(start: int, end: int, size: int) -> int:
    """Records of the successor's batches (from ``start``) holding an offset under ``end``."""
    return sum(min(size, TURNS - first) for first in range(start, TURNS, size) if first < end)


@pytest.mark.parametrize("sink", ["metrics", "log"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hand_overs(), min_size=1, max_size=8))
def test_a_successor_counts_each_turn_once_and_marks_the_same_turns_natively_as_record_by_record(
    tmp_path_factory: pytest.TempPathFactory, sink: str, cases: list[tuple[int, int, int]]
) -> None:
    folder = tmp_path_factory.mktemp("multiproc")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(TURNS), str(folder), json.dumps(cases), sink],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,  # the return code is asserted, with the child's stderr
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for (end, start, size), row in zip(
        cases, json.loads(result.stdout.splitlines()[-1]), strict=True
    ):
        native, plain = row["True"], row["False"]
        first, second, marked, _, second_taken = native
        # Every turn counted once across the two workers; the overlap marked, not counted.
        assert (first, first + second, marked) == (end, TURNS, end - start)
        assert native[:3] == plain[:3]
        # Natively, only batches reaching under the floor came to ``take``; the first
        # worker, on a partition nobody had delivered, took none.
        assert native[3] == 0
        assert second_taken == batches_reaching_under(start, end, size)
        assert plain[3:] == [end, TURNS - start]
