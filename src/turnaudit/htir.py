"""HTIR traces: one per task run, assembled from the turn-events stream.

A trace's steps are, for every turn of the task in session order, the tool
calls the runtime reported and then the turn itself, with sequential indices.
The step dicts are the flat shape the auditors read (``None`` fields left
out); ``HtirTrace.to_avro`` gives the record of ``schemas/htir_trace.v2.avsc``.

A trace keeps where every one of its turns was read (topic, partition,
offset), so evidence built from it names the exact messages it came from. A
turn missing from the middle of a task (task steps 0, 1, 3) is not renumbered
away: the steps keep sequential indices, and the trace says which task steps
are missing (``missing_task_steps``), so the auditor worker keeps such a trace
out of the evidence with that reason.

A step's surface and a tool step's arguments and result go through the surface
policy (``turnaudit.redaction``) as the step is made: dropped (left out, the
default), keyed hashes (of the whole surface) or kept (the surface cut at
``SURFACE_LIMIT``). Nothing built from a trace (the traces topic, manifests,
review packs, evidence, replays) holds more than the policy let through. The
rule-based auditor reads none of them; a model auditor reads them, so it needs
``keep`` (docs/redaction.md).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from turnaudit.htir_steps import (
    STEP_FIELDS,
    SURFACE_LIMIT,
    HtirStep,
    StepAction,
    TaskTurn,
    turn_steps,
)
from turnaudit.redaction import DROPPED, Redaction

__all__ = [  # the steps' shapes live in htir_steps; readers of traces find them here too
    "SURFACE_LIMIT",
    "HtirStep",
    "HtirTrace",
    "PartitionRanges",
    "StepAction",
    "StreamRanges",
    "TaskTurn",
    "TraceAssembler",
    "TraceClose",
    "TraceSourceJson",
    "TurnOffsetJson",
    "turn_steps",
]


class TraceClose(enum.StrEnum):
    END_OF_TASK = "END_OF_TASK"
    IDLE_TIMEOUT = "IDLE_TIMEOUT"
    SHUTDOWN = "SHUTDOWN"


class TurnOffsetJson(TypedDict):
    partition: int
    offset: int


class TraceSourceJson(TypedDict):
    """Where a trace's turns were read."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    first_sequence: int
    last_sequence: int
    runtime_name: str
    runtime_version: str
    event_ids: list[str]
    turn_offsets: list[TurnOffsetJson]


class PartitionRanges(TypedDict):
    partition: int
    offset_ranges: list[list[int]]


class StreamRanges(TypedDict):
    topic: str
    exact: bool
    partitions: list[PartitionRanges]


@dataclass
class HtirTrace:
    task_id: str
    task_family: str
    session_id: str
    topic: str
    partition: int
    runtime: Mapping[str, str]
    steps: list[HtirStep] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    # (partition, offset) of every turn, in the order they joined the trace;
    # empty for a trace decoded from a v1 record (only first/last offsets then).
    turn_offsets: list[tuple[int, int]] = field(default_factory=list)
    closed_by: TraceClose | None = None
    last_seen: float = 0.0
    # What the steps hold of surfaces and tool I/O (applied as each turn is added).
    redaction: Redaction = field(default=DROPPED, compare=False, repr=False)

    def add(
        self,
        event: Mapping[str, Any],
        offset: int,
        breaches: Sequence[str],
        partition: int | None = None,
    ) -> None:
        if event["event_id"] in self.event_ids:
            return  # an at-least-once redelivery: the step is already in the trace
        steps = turn_steps(event, breaches, self.redaction)
        self.add_steps(event["event_id"], event["sequence"], steps, offset, partition)

    def add_steps(
        self,
        event_id: str,
        sequence: int,
        steps: list[HtirStep],
        offset: int,
        partition: int | None = None,
    ) -> None:
        """Add a turn made into its steps already (``turn_steps``, or the feeder's native
        step); a turn already in the trace is not added again."""
        if event_id in self.event_ids:
            return  # an at-least-once redelivery: the step is already in the trace
        index = len(self.steps)
        for step in steps:
            step["index"] = index
            index += 1
        self.steps += steps
        self.offsets.append(offset)
        self.turn_offsets.append((self.partition if partition is None else partition, offset))
        self.sequences.append(sequence)
        self.event_ids.append(event_id)

    def _turn_order(self) -> list[int]:
        """The task steps of the trace's turns, in the order they joined it."""
        return [int(s["task_step"]) for s in self.steps if s["kind"] == "turn"]

    @property
    def missing_task_steps(self) -> list[int]:
        """Task steps absent below the last one seen: turns the trace lacks in its middle."""
        return _missing(self._turn_order())

    @property
    def gap(self) -> str | None:
        """Why the trace is not the task's turns in order, or None when it is."""
        order = self._turn_order()
        missing = _missing(order)
        if missing:
            return (
                f"task step(s) {missing} missing from the trace (turns not in the "
                "stream range, refused or lost); steps not renumbered over the gap"
            )
        if order != sorted(order):
            return f"turns out of task order: task steps {order}"
        return None

    @property
    def source(self) -> TraceSourceJson:
        source = cast(TraceSourceJson, self._source_fields())
        source["turn_offsets"] = self._turn_offsets_json()
        return source

    def _turn_offsets_json(self) -> list[TurnOffsetJson]:
        return [{"partition": p, "offset": o} for p, o in self.turn_offsets]

    def _source_fields(self) -> dict[str, object]:
        """``source`` without the turn offsets (the Avro record has them at its top)."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "first_offset": min(self.offsets),
            "last_offset": max(self.offsets),
            "first_sequence": min(self.sequences),
            "last_sequence": max(self.sequences),
            "runtime_name": self.runtime.get("name", ""),
            "runtime_version": self.runtime.get("version", ""),
            "event_ids": list(self.event_ids),
        }

    def stream_ranges(self) -> StreamRanges:
        """Topic, partitions and offset ranges (inclusive) of the turns the trace came from.

        The turns of one session are interleaved with other sessions' turns, so
        a trace's offsets form several ranges; consecutive offsets are merged.
        """
        found = self.turn_offsets or [(self.partition, o) for o in sorted(set(self.offsets))]
        by_partition: dict[int, list[int]] = {}
        for partition, offset in found:
            by_partition.setdefault(partition, []).append(offset)
        partitions: list[PartitionRanges] = []
        for partition in sorted(by_partition):
            ranges: list[list[int]] = []
            for offset in sorted(set(by_partition[partition])):
                if ranges and offset == ranges[-1][1] + 1:
                    ranges[-1][1] = offset
                else:
                    ranges.append([offset, offset])
            partitions.append({"partition": partition, "offset_ranges": ranges})
        return {"topic": self.topic, "exact": bool(self.turn_offsets), "partitions": partitions}

    def avro_record(self) -> dict[str, object]:
        """The record of ``schemas/htir_trace.v2.avsc`` to serialize: the flat steps as they
        are (a field one leaves out written as its default, null or [], as fastavro does)."""
        return {
            "format_version": 2,
            "task_id": self.task_id,
            "task_family": self.task_family,
            "session_id": self.session_id,
            "closed_by": (self.closed_by or TraceClose.SHUTDOWN).value,
            "source": self._source_fields(),
            "steps": self.steps,
            "turn_offsets": self._turn_offsets_json(),
            "missing_task_steps": self.missing_task_steps,
        }

    def to_avro(self) -> dict[str, object]:
        """``avro_record`` with every step field present, as the record decodes: None where
        the flat shape left one out, the turn-only lists' defaults on a tool step."""
        record = self.avro_record()
        blank = _AVRO_STEP_BLANK
        record["steps"] = [
            {
                **blank,
                # The turn-only lists as Avro defaults them (fresh: the record's own).
                "violated_boundary_ids": [],
                "violated_predicate_ids": [],
                "contract_breaches": [],
                **s,
            }
            if s["kind"] == "tool"
            else {**blank, **s}
            for s in self.steps
        ]
        return record

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> HtirTrace:
        source = record["source"]
        trace = cls(
            task_id=record["task_id"],
            task_family=record["task_family"],
            session_id=record["session_id"],
            topic=source["topic"],
            partition=source["partition"],
            runtime={"name": source["runtime_name"], "version": source["runtime_version"]},
            closed_by=TraceClose(record["closed_by"]),
        )
        trace.steps = [_from_avro_step(s) for s in record["steps"]]
        trace.offsets = [source["first_offset"], source["last_offset"]]
        trace.sequences = [source["first_sequence"], source["last_sequence"]]
        trace.event_ids = list(source["event_ids"])
        trace.turn_offsets = [
            (int(t["partition"]), int(t["offset"])) for t in record.get("turn_offsets") or ()
        ]
        return trace

    def manifest_line(self, *, with_context: bool = True) -> dict[str, object]:
        """The eval-manifest JSONL line the review-pack export reads."""
        source: dict[str, object] = dict(self.source)
        source |= {
            "session_id": self.session_id,
            "closed_by": (self.closed_by or TraceClose.SHUTDOWN).value,
        }
        line: dict[str, object] = {
            "task_id": self.task_id,
            "task_family": self.task_family,
            "trace": {"steps": self.steps, "source": source},
        }
        if with_context:
            turns = [s for s in self.steps if s["kind"] == "turn"]
            line["context"] = {
                "task": f"{self.task_family} task {self.task_id} (session {self.session_id})",
                "tools": [
                    {
                        "name": s["name"],
                        "arguments": s.get("arguments", ""),
                        "result": s.get("result", ""),
                    }
                    for s in self.steps
                    if s["kind"] == "tool"
                ],
                "final_response": turns[-1].get("surface", "") if turns else "",
            }
        return line

    def turn_index(self, task_step: int) -> int | None:
        """HTIR index of the turn step of the task's ``task_step``-th turn."""
        for step in self.steps:
            if step["kind"] == "turn" and step["task_step"] == task_step:
                return int(step["index"])
        return None


_TURN_ONLY_LISTS = ("violated_boundary_ids", "violated_predicate_ids", "contract_breaches")
# An Avro step record's optional fields unset: what ``to_avro`` fills from a flat step.
_AVRO_STEP_BLANK: dict[str, object] = dict.fromkeys(STEP_FIELDS)


def _missing(order: list[int]) -> list[int]:
    """Task steps absent below the last one in ``order``."""
    return sorted(set(range(max(order) + 1)) - set(order)) if order else []


def _from_avro_step(step: Mapping[str, Any]) -> HtirStep:
    out = {k: v for k, v in step.items() if v is not None}
    if out["kind"] == "tool":  # Avro gave the turn-only lists their defaults
        for name in _TURN_ONLY_LISTS:
            out.pop(name, None)
    return cast(HtirStep, out)


class TraceAssembler:
    """Collects task turns into traces; closes one on end-of-task or when idle.

    A trace starts at the task's step 0, so it is never published in part. Its
    steps hold surfaces and tool I/O as ``redaction`` says (dropped by default).
    """

    def __init__(
        self,
        idle_timeout: float,
        clock: Callable[[], float] = time.monotonic,
        redaction: Redaction = DROPPED,
    ) -> None:
        self.idle_timeout = idle_timeout
        self._clock = clock
        self.redaction = redaction
        self._open: dict[str, HtirTrace] = {}
        # Turns of tasks first seen after their step 0: their trace was already
        # published (before a restart re-read them, or closed when idle).
        self.partial_turns_skipped = 0

    @property
    def open_traces(self) -> int:
        return len(self._open)

    def is_open(self, task_id: str) -> bool:
        return task_id in self._open

    def open_trace_list(self) -> list[HtirTrace]:
        """The traces still open, in the order they opened."""
        return list(self._open.values())

    def add(
        self,
        event: Mapping[str, Any],
        *,
        topic: str,
        partition: int,
        offset: int,
        breaches: Sequence[str] = (),
    ) -> HtirTrace | None:
        """Add a turn; returns the trace when this turn ended its task (its steps made by
        ``turn_steps``, then added as the native step's turns are)."""
        task = event.get("task")
        if task is None:
            return None
        return self.add_task_turn(
            TaskTurn(
                task["task_id"],
                task["task_family"],
                task["step"],
                task["end_of_task"],
                event["session_id"],
                event["runtime"],
                event["event_id"],
                event["sequence"],
                turn_steps(event, breaches, self.redaction),
                topic,
                partition,
                offset,
            )
        )

    def add_task_turn(self, turn: TaskTurn) -> HtirTrace | None:
        """Add one task turn made into its steps (``add_task_turns``); the trace it closed."""
        return next(iter(self.add_task_turns((turn,))[0]), None)

    def add_task_turns(self, turns: Iterable[TaskTurn]) -> tuple[list[HtirTrace], list[TaskTurn]]:
        """The one place a trace opens (task step 0), a turn is skipped (no open trace) or added
        (its end of task closes the trace): returns the traces closed and the turns added."""
        open_traces, clock, redaction = self._open, self._clock, self.redaction
        closed: list[HtirTrace] = []
        joined: list[TaskTurn] = []  # in order: the feeder holds offsets by them
        for turn in turns:
            task_id = turn.task_id
            trace = open_traces.get(task_id)
            if trace is None:
                if turn.task_step != 0:
                    self.partial_turns_skipped += 1
                    continue
                trace = open_traces[task_id] = HtirTrace(
                    task_id,
                    turn.task_family,
                    turn.session_id,
                    turn.topic,
                    turn.partition,
                    turn.runtime,
                    redaction=redaction,
                )
            trace.add_steps(turn.event_id, turn.sequence, turn.steps, turn.offset, turn.partition)
            trace.last_seen = clock()
            joined.append(turn)
            if turn.end_of_task:
                trace.closed_by = TraceClose.END_OF_TASK
                del open_traces[task_id]
                closed.append(trace)
        return closed, joined

    def expire(self) -> list[HtirTrace]:
        """Close the traces that saw no turn for ``idle_timeout`` seconds."""
        cutoff = self._clock() - self.idle_timeout
        idle = [tid for tid, t in self._open.items() if t.last_seen <= cutoff]
        closed = []
        for task_id in idle:
            trace = self._open.pop(task_id)
            trace.closed_by = TraceClose.IDLE_TIMEOUT
            closed.append(trace)
        return closed

    def forget_partitions(self, partitions: set[int]) -> list[str]:
        """Drop the open traces of sessions on ``partitions`` (now another
        reader's, who rebuilds them from step 0); returns their task ids."""
        gone = [tid for tid, t in self._open.items() if t.partition in partitions]
        for task_id in gone:
            del self._open[task_id]
        return gone

    def close_all(self, closed_by: TraceClose = TraceClose.SHUTDOWN) -> list[HtirTrace]:
        """Close every open trace, in the order they opened."""
        closed = list(self._open.values())
        for trace in closed:
            trace.closed_by = closed_by
        self._open.clear()
        return closed
