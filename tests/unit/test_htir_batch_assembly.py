"""``TraceAssembler.add_task_turns`` (a run of task turns added in one call, the one place
a trace opens, a turn is skipped or added) against the assembler it replaced, which added
one turn at a time: over random runs of task turns (tasks interleaved, turns of tasks not
open, redelivered turns, tasks ending and starting again, several partitions) it closes the
same traces in the same order, says the same turns joined a trace, leaves the same traces
open and counts the same skipped turns, with the clock read as often."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.htir import HtirTrace, TaskTurn, TraceAssembler, TraceClose


class OneAtATime:
    """The assembler as it was: ``add_task_turn`` opening, skipping or adding one turn."""

    def __init__(self, clock: itertools.count[int]) -> None:
        self._clock = clock
        self._open: dict[str, HtirTrace] = {}
        self.partial_turns_skipped = 0

    def add_task_turn(self, turn: TaskTurn) -> tuple[HtirTrace | None, bool]:
        """The trace this turn closed, and whether the turn joined a trace."""
        trace = self._open.get(turn.task_id)
        if trace is None and turn.task_step != 0:
            self.partial_turns_skipped += 1
            return None, False
        if trace is None:
            trace = HtirTrace(
                turn.task_id,
                turn.task_family,
                turn.session_id,
                turn.topic,
                turn.partition,
                turn.runtime,
            )
            self._open[turn.task_id] = trace
        trace.add_steps(turn.event_id, turn.sequence, turn.steps, turn.offset, turn.partition)
        trace.last_seen = next(self._clock)
        if turn.end_of_task:
            trace.closed_by = TraceClose.END_OF_TASK
            return self._open.pop(turn.task_id), True
        return None, True


@st.composite
def runs(draw: st.DrawFn) -> list[list[TaskTurn]]:
    """Runs of task turns: a few tasks, steps in or out of order, ends, redeliveries."""
    turns: list[TaskTurn] = []
    for offset in range(draw(st.integers(0, 60))):
        task = draw(st.integers(0, 4))
        step = draw(st.integers(0, 3))
        event = draw(st.integers(0, 8)) if draw(st.booleans()) else 100 + offset
        steps: list[dict[str, object]] = [
            {"kind": "turn", "event_id": f"e{event}", "task_step": step}
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


@settings(max_examples=300, deadline=None)
@given(runs())
def test_a_run_added_at_once_is_the_turns_added_one_at_a_time(cut: list[list[TaskTurn]]) -> None:
    reference_clock, clock = itertools.count(), itertools.count()
    reference = OneAtATime(reference_clock)
    assembler = TraceAssembler(3600, clock=lambda: next(clock))
    for run in cut:
        want_closed: list[HtirTrace] = []
        want_joined: list[TaskTurn] = []
        for turn in fresh(run):
            trace, joined = reference.add_task_turn(turn)
            if trace is not None:
                want_closed.append(trace)
            if joined:
                want_joined.append(turn)
        closed, joined_turns = assembler.add_task_turns(fresh(run))
        assert closed == want_closed
        assert [t.offset for t in joined_turns] == [t.offset for t in want_joined]
        assert assembler.open_trace_list() == list(reference._open.values())
        assert assembler.partial_turns_skipped == reference.partial_turns_skipped
        assert next(clock) == next(reference_clock)  # the clock read as often
