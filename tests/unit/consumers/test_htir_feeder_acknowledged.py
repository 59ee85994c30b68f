"""What the HTIR feeder says of a trace once it is acknowledged (its manifest line, its gap
warning, its count by how it closed) and the bytes it stored are the closed trace's own, as
the Python assembly the trace store replaced (the oracle, ``tests/support/htir_reference.py``)
closes it: the feeder keeps only those (``ProducedTrace``) from its produce to its delivery
report, through transient failures produced again.

Over random tasks (one to five turns, turns missing from the middle, tasks on several
partitions), batch cuts and delivery outcomes (stored, or failed and produced again).
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.support.htir_reference import ReferenceAssembler
from tests.unit.consumers.test_htir_feeder_refusals import (
    SETTINGS,
    TURNS,
    FakeProducer,
    Outcome,
    decoded_turn,
)
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.htir import TaskTurn
from turnaudit.htir_steps import task_turn
from turnaudit.kafka.producer import DeliveryCallback
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer

SERIALIZE = SingleObjectSerializer(shipped_catalog("htir_trace").latest)


@st.composite
def task_turns(draw: st.DrawFn) -> list[ConsumedTurn]:
    """Tasks one after the other, each on a partition, some missing middle turns."""
    turns: list[ConsumedTurn] = []
    offsets = [0, 0, 0]
    for n in range(draw(st.integers(1, 6))):
        last = draw(st.integers(0, 4))
        partition = draw(st.integers(0, 2))
        kept = [0, *draw(st.sets(st.integers(1, last), max_size=last)), last] if last else [0]
        for step in sorted(set(kept)):
            turns.append(
                ConsumedTurn(
                    decoded_turn(n, step, last),
                    SequenceCheck(SequenceOutcome.IN_ORDER),
                    TURNS,
                    partition,
                    offsets[partition],
                )
            )
            offsets[partition] += 1
    return turns


@settings(max_examples=80, deadline=None)
@given(task_turns(), st.lists(st.integers(0, 30), max_size=3), st.data())
def test_what_the_feeder_says_of_an_acknowledged_trace_is_the_closed_traces_own(
    turns: list[ConsumedTurn], cuts: list[int], data: st.DataObject
) -> None:
    reference = ReferenceAssembler(3600, clock=lambda: 0.0)
    closed = [
        trace
        for turn in turns
        if (
            trace := reference.add(
                turn.event, topic=turn.topic, partition=turn.partition, offset=turn.offset
            )
        )
        is not None
    ]
    producer = FakeProducer(
        outcome=lambda batch: [
            data.draw(st.sampled_from([Outcome.STORED, Outcome.TRANSIENT])) for _ in batch
        ]
    )
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "manifest.jsonl"
        registry = CollectorRegistry()
        sink = HtirFeederSink(
            SETTINGS, registry=registry, idle_timeout=3600, producer=producer, manifest=manifest
        )
        with capture_logs() as logs:
            bounds = sorted({0, len(turns), *(min(c, len(turns)) for c in cuts)})
            for start, end in itertools.pairwise(bounds):
                for turn in turns[start:end]:
                    sink.take(turn)
                sink.flush()
            for _ in range(200):  # polls until every trace is stored
                if sink.published == len(closed):
                    break
                sink.tick()
        lines = manifest.read_text(encoding="utf-8").splitlines()
        sink.close()
    assert sink.published == len(closed)
    assert sorted(lines) == sorted(json.dumps(trace.manifest_line()) for trace in closed)
    stored = {
        sent.key: sent.value
        for batch in producer.batches
        for sent in batch
        if sent.key in producer.stored
    }
    assert stored == {t.task_id.encode(): SERIALIZE(t.avro_record()) for t in closed}
    gaps = [
        (line["task_id"], line["detail"], line["missing_task_steps"])
        for line in logs
        if line["event"] == "htir_trace_gap"
    ]
    assert sorted(gaps) == sorted(
        (t.task_id, t.gap, t.missing_task_steps) for t in closed if t.gap is not None
    )
    assert registry.get_sample_value(
        "turnaudit_htir_traces_total", {"closed_by": "END_OF_TASK"}
    ) == float(len(closed))


@dataclass
class RefusingProducer(FakeProducer):
    """A producer whose queue is full now and then: ``produce`` raises ``BufferError`` (as
    librdkafka's does) on the calls ``refuse`` picks, and queues nothing for them."""

    refuse: Callable[[], bool] = lambda: False

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
        serve_reports: bool = True,
    ) -> None:
        if self.refuse():
            raise BufferError("Local: Queue full")
        super().produce(topic, value, key, on_delivery=on_delivery, serve_reports=serve_reports)


@settings(max_examples=60, deadline=None)
@given(task_turns(), st.lists(st.integers(0, 30), max_size=3), st.data())
def test_a_producer_that_refuses_to_queue_loses_no_trace_and_holds_no_offset_for_ever(
    turns: list[ConsumedTurn], cuts: list[int], data: st.DataObject
) -> None:
    """A flush the producer refused (its queue full) raises, and the runtime flushes again:
    every closed trace is stored in the end, and once all are acknowledged no offset is
    held (a trace held twice, or held and never produced, would hold one for ever)."""
    closed = ReferenceAssembler(3600, clock=lambda: 0.0).add_task_turns(
        t for turn in turns if (t := reference_turn(turn)) is not None
    )
    producer = RefusingProducer(
        outcome=lambda batch: [Outcome.STORED] * len(batch),
        refuse=lambda: data.draw(st.booleans()) and data.draw(st.booleans()),
    )
    sink = HtirFeederSink(
        SETTINGS, registry=CollectorRegistry(), idle_timeout=3600, producer=producer
    )
    bounds = sorted({0, len(turns), *(min(c, len(turns)) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        for turn in turns[start:end]:
            sink.take(turn)
        for _ in range(200):  # the runtime calls flush again until it returns
            try:
                sink.flush()
                break
            except BufferError:
                continue
    producer.refuse = lambda: False
    for _ in range(50):
        if sink.published == len(closed):
            break
        sink.tick()
    assert sorted(producer.stored) == sorted(t.task_id.encode() for t in closed)
    assert sink.published >= len(closed)
    assert sink.open_traces == 0
    assert sink.held_offsets() == {}


def reference_turn(turn: ConsumedTurn) -> TaskTurn | None:
    return task_turn(turn.event, turn.topic, turn.partition, turn.offset)
