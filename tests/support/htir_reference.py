"""The trace assembly as it was written in Python before the trace store (``native/src/htir``)
took it: the oracle the store's tests hold it to. Each closed trace is an ``HtirTrace``
built turn by turn: steps numbered on in place, a redelivered turn not added twice, the
clock read for every turn."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from turnaudit.htir import HtirTrace, TaskTurn, TraceClose
from turnaudit.htir_steps import task_turn
from turnaudit.redaction import DROPPED, Redaction


def reference_missing(order: list[int]) -> list[int]:
    """Task steps absent below the last one in ``order``."""
    return sorted(set(range(max(order) + 1)) - set(order)) if order else []


def reference_gap(order: list[int]) -> str | None:
    missing = reference_missing(order)
    if missing:
        return (
            f"task step(s) {missing} missing from the trace (turns not in the "
            "stream range, refused or lost); steps not renumbered over the gap"
        )
    if order != sorted(order):
        return f"turns out of task order: task steps {order}"
    return None


def add_steps(trace: HtirTrace, turn: TaskTurn) -> None:
    """A turn made into its steps added to ``trace``, numbered on; not twice."""
    if turn.event_id in trace.event_ids:
        return
    index = len(trace.steps)
    for step in turn.steps:
        step["index"] = index
        index += 1
    trace.steps += turn.steps
    trace.offsets.append(turn.offset)
    trace.turn_offsets.append((turn.partition, turn.offset))
    trace.sequences.append(turn.sequence)
    trace.event_ids.append(turn.event_id)


class ReferenceAssembler:
    """``TraceAssembler`` as it was: a dict of open ``HtirTrace``s, in opening order."""

    def __init__(
        self,
        idle_timeout: float,
        clock: Callable[[], float],
        redaction: Redaction = DROPPED,
    ) -> None:
        self.idle_timeout = idle_timeout
        self._clock = clock
        self.redaction = redaction
        self.open: dict[str, HtirTrace] = {}
        self.last_seen: dict[str, float] = {}
        self.partial_turns_skipped = 0

    def add(
        self,
        event: Mapping[str, Any],
        *,
        topic: str,
        partition: int,
        offset: int,
        breaches: Sequence[str] = (),
    ) -> HtirTrace | None:
        # The turn made into its steps as the product makes it: the assembly is the oracle.
        turn = task_turn(
            event, topic, partition, offset, contract_breaches=breaches, redaction=self.redaction
        )
        if turn is None:
            return None
        return next(iter(self.add_task_turns((turn,))), None)

    def add_task_turns(self, turns: Iterable[TaskTurn]) -> list[HtirTrace]:
        closed: list[HtirTrace] = []
        for turn in turns:
            trace = self.open.get(turn.task_id)
            if trace is None:
                if turn.task_step != 0:
                    self.partial_turns_skipped += 1
                    continue
                trace = self.open[turn.task_id] = HtirTrace(
                    turn.task_id,
                    turn.task_family,
                    turn.session_id,
                    turn.topic,
                    turn.partition,
                    turn.runtime,
                )
            add_steps(trace, turn)
            self.last_seen[turn.task_id] = self._clock()
            if turn.end_of_task:
                trace.closed_by = TraceClose.END_OF_TASK
                del self.open[turn.task_id]
                closed.append(trace)
        return closed

    def expire(self) -> list[HtirTrace]:
        cutoff = self._clock() - self.idle_timeout
        idle = [tid for tid in self.open if self.last_seen[tid] <= cutoff]
        closed = []
        for task_id in idle:
            trace = self.open.pop(task_id)
            trace.closed_by = TraceClose.IDLE_TIMEOUT
            closed.append(trace)
        return closed

    def forget_partitions(self, partitions: set[int]) -> list[str]:
        gone = [tid for tid, t in self.open.items() if t.partition in partitions]
        for task_id in gone:
            del self.open[task_id]
        return gone

    def close_all(self, closed_by: TraceClose = TraceClose.SHUTDOWN) -> list[HtirTrace]:
        closed = list(self.open.values())
        for trace in closed:
            trace.closed_by = closed_by
        self.open.clear()
        return closed
