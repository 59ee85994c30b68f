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
