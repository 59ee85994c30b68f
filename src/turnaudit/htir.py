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
import functools
import io
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict, cast

import fastavro

from turnaudit._native import TraceStore, trace_gap
from turnaudit.htir_steps import (
    STEP_FIELDS,
    SURFACE_LIMIT,
    HtirStep,
    StepAction,
    TaskTurn,
    task_turn,
    turn_steps,
)
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.serialization.framing import SINGLE_OBJECT_HEADER_LEN, single_object_header
from turnaudit.serialization.schemas import shipped_catalog

__all__ = [  # the steps' shapes live in htir_steps; readers of traces find them here too
    "SURFACE_LIMIT",
    "EncodedTrace",
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
    "decoded_trace",
    "trace_store",
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

    def _turn_order(self) -> list[int]:
        """The task steps of the trace's turns, in the order they joined it."""
        return [int(s["task_step"]) for s in self.steps if s["kind"] == "turn"]

    @property
    def missing_task_steps(self) -> list[int]:
        """Task steps absent below the last one seen: turns the trace lacks in its middle."""
        missing, _ = trace_gap(self._turn_order())
        return missing

    @property
    def gap(self) -> str | None:
        """Why the trace is not the task's turns in order, or None when it is (the rule is
        the trace store's, ``native/src/htir/record.rs``)."""
        _, why = trace_gap(self._turn_order())
        return why

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
        trace.sequences = [source["first_sequence"], source["last_sequence"]]
        trace.event_ids = list(source["event_ids"])
        trace.turn_offsets = [
            (int(t["partition"]), int(t["offset"])) for t in record.get("turn_offsets") or ()
        ]
        # Every turn's offset where the record has them (v2), else the first and last.
        trace.offsets = [o for _, o in trace.turn_offsets] or [
            source["first_offset"],
            source["last_offset"],
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


def _from_avro_step(step: Mapping[str, Any]) -> HtirStep:
    # The flat step's key order (the manifest writes it): its index last, as numbered.
    out = {k: v for k, v in step.items() if v is not None and k != "index"}
    out["index"] = step["index"]
    if out["kind"] == "tool":  # Avro gave the turn-only lists their defaults
        for name in _TURN_ONLY_LISTS:
            out.pop(name, None)
    return cast(HtirStep, out)


class EncodedTrace(NamedTuple):
    """A closed trace as the trace store writes it: its record (``schemas/htir_trace.v2.avsc``,
    single-object framed) and what the feeder's acknowledgement and hold read of it."""

    task_id: str
    value: bytes
    closed_by: str
    gap: str | None
    missing_task_steps: tuple[int, ...]
    partition: int  # where its first turn was read: what a restart reads again for it
    first_offset: int


def trace_store() -> TraceStore:
    """The native trace store over the shipped trace schema: the one place traces are
    assembled (``native/src/htir``), for the feeder and for ``TraceAssembler``."""
    writer = shipped_catalog("htir_trace").latest
    raw = json.loads(writer.schema_json)
    (steps,) = (f["type"]["items"] for f in raw["fields"] if f["name"] == "steps")
    parsed_step = fastavro.parse_schema(steps)

    def fastavro_step(step: HtirStep) -> bytes:
        # A step the native encoder does not write as surely as fastavro (its bytes are
        # fastavro's either way).
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed_step, step)
        return out.getvalue()

    return TraceStore(
        raw, single_object_header(writer.fingerprint), fastavro_step, tuple.__new__, EncodedTrace
    )


def decoded_trace(trace: EncodedTrace | bytes) -> HtirTrace:
    """The trace a record of the store holds, as readers of traces take it."""
    value = trace.value if isinstance(trace, EncodedTrace) else trace
    record = fastavro.schemaless_reader(
        io.BytesIO(value[SINGLE_OBJECT_HEADER_LEN:]), _trace_schema(), None
    )
    return HtirTrace.from_avro(cast(Mapping[str, Any], record))


@functools.cache
def _trace_schema() -> Any:
    return shipped_catalog("htir_trace").latest.parsed


class TraceAssembler:
    """Collects task turns into traces; closes one on end-of-task or when idle: the trace
    store (``trace_store``) with a clock and the step rule, its closed traces decoded.

    A trace starts at the task's step 0, so it is never published in part. Its steps hold
    surfaces and tool I/O as ``redaction`` says (dropped by default). The feeder uses the
    store itself (it publishes the records as written); replays and tests read traces.
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
        self._store = trace_store()

    @property
    def open_traces(self) -> int:
        return int(self._store.open_traces)

    @property
    def partial_turns_skipped(self) -> int:
        """Turns of tasks first seen after their step 0: their trace was already
        published (before a restart re-read them, or closed when idle)."""
        return int(self._store.partial_turns_skipped)

    def is_open(self, task_id: str) -> bool:
        return bool(self._store.is_open(task_id))

    def open_task_ids(self) -> list[str]:
        """The task ids of the traces still open, in the order they opened."""
        return list(self._store.open_task_ids())

    def add(
        self,
        event: Mapping[str, Any],
        *,
        topic: str,
        partition: int,
        offset: int,
        breaches: Sequence[str] = (),
    ) -> HtirTrace | None:
        """Add a turn; returns the trace when this turn ended its task."""
        turn = task_turn(
            event, topic, partition, offset, contract_breaches=breaches, redaction=self.redaction
        )
        return None if turn is None else self.add_task_turn(turn)

    def add_task_turn(self, turn: TaskTurn) -> HtirTrace | None:
        """Add one task turn made into its steps; the trace it closed."""
        return next(iter(self.add_task_turns((turn,))), None)

    def add_task_turns(self, turns: Iterable[TaskTurn]) -> list[HtirTrace]:
        """Add a run of task turns: the traces their ends of task closed, in order."""
        return [decoded_trace(t) for t in self._store.add_task_turns(turns, self._clock())]

    def expire(self) -> list[HtirTrace]:
        """Close the traces that saw no turn for ``idle_timeout`` seconds."""
        cutoff = self._clock() - self.idle_timeout
        return [decoded_trace(t) for t in self._store.expire(cutoff)]

    def forget_partitions(self, partitions: set[int]) -> list[str]:
        """Drop the open traces of sessions on ``partitions`` (now another
        reader's, who rebuilds them from step 0); returns their task ids."""
        return list(self._store.forget_partitions(sorted(partitions)))

    def close_all(self, closed_by: TraceClose = TraceClose.SHUTDOWN) -> list[HtirTrace]:
        """Close every open trace, in the order they opened."""
        return [decoded_trace(t) for t in self._store.close_all(closed_by.value)]
