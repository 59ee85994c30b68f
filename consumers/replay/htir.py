"""Replays into the HTIR feeder's assembly.

Replay outputs (``turnaudit replay --into``):

* ``htir:PATH``: the traces of the range, one canonical JSON line per trace
  (the ``htir_trace`` record: steps, source, every turn's partition and offset),
  in the order they closed. Same range, same bytes.
* ``htir-topic:NAME``: the same traces published to topic ``NAME`` (Avro
  single-object, key = task id; the runtime announces the schema on the
  schemas topic, its one writer);
  the replay's file (``NAME`` in the working folder) is the receipt: the same
  lines as ``htir:``.

The turns go through the runtime's ``TurnEventValidation`` into the feeder's
``TraceAssembler``, as in the live feeder, so a trace carries the same
contract breaches. A replay has no wall clock to close idle traces by: a trace
closes on its end-of-task turn, and the traces still open at the end of the
range close then, as ``IDLE_TIMEOUT`` (what the live feeder does once their
turns stop). A task whose step 0 is before the range is not assembled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from turnaudit.consumers.replay.sink import SinkReplayOutput
from turnaudit.consumers.replay.topic import writable_topic
from turnaudit.consumers.runtime import BatchingSink, ConsumedTurn
from turnaudit.errors import TurnAuditError
from turnaudit.htir import HtirTrace, TraceAssembler, TraceClose
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.records import Record
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.replay.files import write_atomically
from turnaudit.replay.outputs import OutputContext, OutputKinds
from turnaudit.sealing.opening import TurnOpener, turn_opener
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

_ACK_TIMEOUT_S = 30.0


class TraceReplaySink(BatchingSink):
    """The feeder's assembly without a wall clock: traces close on end-of-task or at the end."""

    # Tracks its own progress (held offsets): no redelivery marks.
    marks_redeliveries: ClassVar[bool] = False

    def __init__(
        self,
        emit: Callable[[HtirTrace], None],
        redaction: Redaction = DROPPED,
        opener: TurnOpener | None = None,
    ) -> None:
        super().__init__()
        self._emit = emit
        self._open = opener  # sealed turns opened before the policy (turn_opener)
        self._assembler = TraceAssembler(idle_timeout=math.inf, redaction=redaction)

    @property
    def partial_turns_skipped(self) -> int:
        return self._assembler.partial_turns_skipped

    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        for turn in turns:
            if self._open is not None and turn.event["task"] is not None:
                self._open(turn.event)
            trace = self._assembler.add(
                turn.event,
                topic=turn.topic,
                partition=turn.partition,
                offset=turn.offset,
                breaches=turn.breaches,
            )
            if trace is not None:
                self._emit(trace)

    def close(self) -> None:
        for trace in self._assembler.close_all(TraceClose.IDLE_TIMEOUT):
            self._emit(trace)


def trace_line(trace: HtirTrace) -> bytes:
    """One trace as a canonical JSON line (sorted keys, no spaces)."""
    text = json.dumps(trace.to_avro(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8") + b"\n"


class HtirFileReplayOutput(SinkReplayOutput):
    """``htir:PATH``: the range's traces, one canonical line each, in closing order.

    A whole-range output (traces span batches): written atomically at the end;
    an interrupted replay into it reads its range again.
    """

    def __init__(
        self,
        decode: TurnEventDeserializer,
        path: Path | None = None,
        redaction: Redaction = DROPPED,
        opener: TurnOpener | None = None,
    ) -> None:
        self.traces: list[HtirTrace] = []
        self.trace_sink = TraceReplaySink(self._closed, redaction, opener)
        self._path = path
        super().__init__(self.trace_sink, decode)

    def _closed(self, trace: HtirTrace) -> None:
        self.traces.append(trace)

    def finish(self) -> None:
        super().finish()  # the traces still open close now
        if self._path is not None:
            write_atomically(self._path, b"".join(trace_line(t) for t in self.traces))


class HtirTopicReplayOutput(HtirFileReplayOutput):
    """``htir-topic:NAME``: the traces published to ``NAME`` (which must exist, and
    not be a live topic), as they close. The trace schema is on the schemas topic
    already: the runtime's publisher announces every shipped writer schema."""

    def __init__(self, context: OutputContext) -> None:
        self._topic = writable_topic(context, "htir-topic")
        surfaces = context.request.surfaces
        super().__init__(context.decode, None, surfaces, turn_opener(context.settings, surfaces))
        self._producer = KafkaProducer.reliable(context.settings)
        self._serialize = SingleObjectSerializer(shipped_catalog("htir_trace").latest)

    def _closed(self, trace: HtirTrace) -> None:
        super()._closed(trace)
        self._producer.produce(
            self._topic, self._serialize(trace.to_avro()), trace.task_id.encode()
        )

    def write(self, messages: Sequence[Record]) -> int:
        rejected = super().write(messages)
        self._acknowledged()
        return rejected

    def finish(self) -> None:
        super().finish()
        self._acknowledged()

    def _acknowledged(self) -> None:
        if self._producer.flush(_ACK_TIMEOUT_S) != 0:
            raise TurnAuditError(
                f"traces not acknowledged by topic {self._topic} (does it exist?); "
                "re-run the same command to replay the range again"
            )


def register_htir_outputs(kinds: OutputKinds) -> None:
    """The replay output kinds of this module (``turnaudit replay --into``)."""
    kinds.add(
        "htir",
        "HTIR traces, one canonical JSON line each, in closing order",
        lambda c: HtirFileReplayOutput(
            c.decode,
            c.target.path,
            c.request.surfaces,
            turn_opener(c.settings, c.request.surfaces),
        ),
    )
    kinds.add(
        "htir-topic",
        "HTIR traces published to an existing topic as they close",
        HtirTopicReplayOutput,
        writes_file=False,
    )
