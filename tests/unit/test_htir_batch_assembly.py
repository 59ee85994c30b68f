"""The trace store (``native/src/htir``, behind ``TraceAssembler``) against the assembly it
replaced, written in Python and kept as the oracle (``tests/support/htir_reference.py``):
over random runs of task turns (tasks interleaved, turns of tasks not open, redelivered
turns, tasks ending and starting again, several partitions, runs cut anywhere) it closes
the same traces in the same order, byte for byte as fastavro writes the oracle's, leaves
the same traces open, holds the same offsets, counts the same skipped turns, and expires,
hands over and shuts down the same traces."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.htir_reference import ReferenceAssembler
from turnaudit.htir import (
    HtirTrace,
    TaskTurn,
    TraceAssembler,
    TraceClose,
    decoded_trace,
    trace_store,
)
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer

SERIALIZE = SingleObjectSerializer(shipped_catalog("htir_trace").latest)


@st.composite
def runs(draw: st.DrawFn) -> list[list[TaskTurn]]:
    """Runs of task turns: a few tasks, steps in or out of order, ends, redeliveries."""
    turns: list[TaskTurn] = []
    for offset in range(draw(st.integers(0, 60))):
        task = draw(st.integers(0, 4))
        step = draw(st.integers(0, 3))
        event = draw(st.integers(0, 8)) if draw(st.booleans()) else 100 + offset
        steps: list[dict[str, object]] = [
            {"kind": "turn", "event_id": f"e{event}", "task_step": step, "occurred_at": offset}
        ]
        turns.append(
            TaskTurn(
                f"task-{task}",
                "family",
                step,
                draw(st.booleans()) and draw(st.booleans()),
                f"session-{task}",
                {"name": "r", "version": "1"},
                f"e{event}",
                offset,
                steps,  # type: ignore[arg-type]  # the shape add_steps reads, not a full step
                "t",
                draw(st.integers(0, 2)),
                offset,
            )
        )
    cuts = sorted(draw(st.lists(st.integers(0, len(turns)), max_size=4)))
    return [turns[a:b] for a, b in itertools.pairwise([0, *cuts, len(turns)])]


def fresh(run: list[TaskTurn]) -> list[TaskTurn]:
    """The turns with steps of their own (``add_steps`` numbers them in place)."""
    # (the copies are dicts of the steps' keys, as the turns' own are)
    return [turn._replace(steps=[dict(s) for s in turn.steps]) for turn in run]  # type: ignore[misc]  # copies


def stored(trace: HtirTrace) -> bytes:
    """The oracle's trace as the feeder stored it before the store: fastavro's bytes."""
    return SERIALIZE(trace.avro_record())


@settings(max_examples=300, deadline=None)
@given(
    runs(),
    st.lists(st.integers(0, 3), min_size=6, max_size=6),
    st.sampled_from([None, *TraceClose]),
    st.sets(st.integers(0, 2), max_size=2),
)
def test_the_store_closes_holds_and_keeps_open_what_the_python_assembly_did(
    cut: list[list[TaskTurn]], idle_after: list[int], ending: TraceClose | None, revoked: set[int]
) -> None:
    now = [0.0]  # a run's turns are all seen at its time (the store is told it once)
    reference = ReferenceAssembler(0.0, clock=lambda: now[0])
    store = trace_store()
    for tick, run in enumerate(cut):
        now[0] = float(tick)
        want = reference.add_task_turns(fresh(run))
        got = store.add_task_turns(fresh(run), now[0])
        assert [t.value for t in got] == [stored(t) for t in want]
        assert [(t.task_id, t.closed_by, t.gap) for t in got] == [
            (t.task_id, "END_OF_TASK", t.gap) for t in want
        ]
        assert [t.missing_task_steps for t in got] == [tuple(t.missing_task_steps) for t in want]
        assert [(t.partition, t.first_offset) for t in got] == [t.turn_offsets[0] for t in want]
        assert store.open_task_ids() == list(reference.open)
        assert store.partial_turns_skipped == reference.partial_turns_skipped
        assert store.held_offsets() == held(reference)
        # Idle: the traces last seen ``idle_after`` runs ago or longer close.
        now[0] = float(tick - idle_after[tick % len(idle_after)])
        assert [t.value for t in store.expire(now[0])] == [stored(t) for t in reference.expire()]
    if revoked:
        assert store.forget_partitions(sorted(revoked)) == reference.forget_partitions(revoked)
    if ending is not None:
        assert [t.value for t in store.close_all(ending.value)] == [
            stored(t) for t in reference.close_all(ending)
        ]
        assert store.open_traces == 0


def held(reference: ReferenceAssembler) -> dict[int, int]:
    out: dict[int, int] = {}
    for trace in reference.open.values():
        partition, offset = trace.turn_offsets[0]
        out[partition] = min(offset, out.get(partition, offset))
    return out


def test_trace_assembler_decodes_the_stores_traces() -> None:
    """The assembler's traces (replays and readers) are the records the store wrote."""
    turns = [
        TaskTurn(
            "task-0",
            "family",
            step,
            step == 2,
            "session-0",
            {"name": "r", "version": "1"},
            f"e{step}",
            step,
            [{"kind": "turn", "event_id": f"e{step}", "task_step": step, "occurred_at": 0}],  # type: ignore[list-item]  # a step's required fields
            "t",
            1,
            10 + step,
        )
        for step in range(3)
    ]
    (trace,) = TraceAssembler(60, clock=lambda: 0.0).add_task_turns(fresh(turns))
    (want,) = ReferenceAssembler(60, clock=lambda: 0.0).add_task_turns(fresh(turns))
    assert stored(trace) == stored(want)
    assert trace.turn_offsets == [(1, 10), (1, 11), (1, 12)]


def test_a_step_the_native_encoder_leaves_to_fastavro_is_written_as_fastavro_writes_it() -> None:
    """An int where the schema has a double: the native encoder does not write it as surely
    as fastavro, so the store takes fastavro's bytes for that step (1 written as 1.0)."""
    steps = [
        {"kind": "turn", "event_id": "e0", "task_step": 0, "occurred_at": 5, "identity_score": 1}
    ]
    turn = TaskTurn(
        "task-0",
        "family",
        0,
        True,
        "session-0",
        {"name": "r", "version": "1"},
        "e0",
        0,
        steps,  # type: ignore[arg-type]  # an int where a float goes, on purpose
        "t",
        0,
        3,
    )
    (got,) = trace_store().add_task_turns(fresh([turn]), 0.0)
    (want,) = ReferenceAssembler(60, clock=lambda: 0.0).add_task_turns(fresh([turn]))
    assert got.value == stored(want)
    assert decoded_trace(got).steps[0]["identity_score"] == 1.0
