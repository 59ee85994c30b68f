"""Replays into the HTIR feeder's assembly, and EVR-6 evidence rebuilt from the turn stream.

Replay outputs (``turnaudit replay --into``):

* ``htir:PATH``: the traces of the range, one canonical JSON line per trace
  (the ``htir_trace`` record: steps, source, every turn's partition and offset),
  in the order they closed. Same range, same bytes.
* ``htir-topic:NAME``: the same traces published to topic ``NAME`` (Avro
  single-object, key = task id, the schema announced on the schemas topic);
  the replay's file (``NAME`` in the working folder) is the receipt: the same
  lines as ``htir:``.

The turns go through the runtime's ``TurnEventValidation`` into the feeder's
``TraceAssembler``, as in the live feeder, so a trace carries the same
contract breaches. A replay has no wall clock to close idle traces by: a trace
closes on its end-of-task turn, and the traces still open at the end of the
range close then, as ``IDLE_TIMEOUT`` (what the live feeder does once their
turns stop). A task whose step 0 is before the range is not assembled.

``rebuild_evidence`` is ``turnaudit eval rebuild``: the range into traces
(as above, nothing joined or committed), each trace through the same Avro
record the live worker reads, then the auditor worker's evidence logic
(``TraceEvidence``) with the same labels and pinned auditor. The auditor is
run again on every prefix of every case; where the live worker recorded
observations for the same trace (``<prefix>auditor-observations``, same task,
same turns, same auditor identity) the re-derived verdicts must equal the
recorded ones, and the recorded latencies are kept (a latency is a
measurement, not something a replay can re-derive), so the rebuilt file is
byte-identical to the live worker's.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import structlog

from turnaudit.consumers.replay import SinkReplayOutput, writable_topic
from turnaudit.consumers.runtime import BatchingSink, ConsumedTurn
from turnaudit.errors import TurnAuditError
from turnaudit.evaluation.auditors import PrefixAuditor
from turnaudit.evaluation.errors import NotReproducedError
from turnaudit.evaluation.files import (
    EvidenceFile,
    Observation,
    Verdict,
    observation_from_record,
)
from turnaudit.evaluation.labels import TaskLabel
from turnaudit.evaluation.trace_evidence import EvidenceTally, TraceEvidence
from turnaudit.htir import HtirTrace, TraceAssembler, TraceClose
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.kafka.reading import end_offsets, read_range
from turnaudit.records import Record
from turnaudit.replay import (
    OutputContext,
    OutputKinds,
    ReplayRequest,
    ReplaySummary,
    ReplayTarget,
    replay,
    write_atomically,
)
from turnaudit.serialization.schema_topic import announce_schema
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.replay_htir")

_ACK_TIMEOUT_S = 30.0


class TraceReplaySink(BatchingSink):
    """The feeder's assembly without a wall clock: traces close on end-of-task or at the end."""

    wants_breaching_turns: ClassVar[bool] = True

    def __init__(self, emit: Callable[[HtirTrace], None]) -> None:
        super().__init__()
        self._emit = emit
        self._assembler = TraceAssembler(idle_timeout=math.inf)

    @property
    def partial_turns_skipped(self) -> int:
        return self._assembler.partial_turns_skipped

    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        for turn in turns:
            trace = self._assembler.add(
                turn.event, topic=turn.topic, partition=turn.partition, offset=turn.offset,
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

    def __init__(self, decode: TurnEventDeserializer, path: Path | None = None) -> None:
        self.traces: list[HtirTrace] = []
        self.trace_sink = TraceReplaySink(self._closed)
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
    not be a live topic), as they close. The trace schema is announced on the
    schemas topic under its fingerprint, as the feeder announces it: the record
    compaction keeps is the same."""

    def __init__(self, context: OutputContext) -> None:
        self._topic = writable_topic(context, "htir-topic")
        super().__init__(context.decode)
        self._producer = KafkaProducer.reliable(context.settings)
        self._serialize = SingleObjectSerializer(shipped_catalog("htir_trace").latest)
        announce_schema(self._producer.produce, context.settings.topics.schemas,
                        self._serialize.schema)

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
    kinds.add("htir", "HTIR traces, one canonical JSON line each, in closing order",
              lambda c: HtirFileReplayOutput(c.decode, c.target.path))
    kinds.add("htir-topic", "HTIR traces published to an existing topic as they close",
              HtirTopicReplayOutput, writes_file=False)


# --- evidence rebuilt from the stream ---------------------------------------------------


RecordedKey = tuple[str, tuple[str, ...]]


def recorded_observations(
    settings: KafkaSettings, auditor_id: Mapping[str, object], timeout: float = 120.0
) -> dict[RecordedKey, tuple[Observation, ...]]:
    """The live worker's observations by (task id, the trace's event ids), for one auditor.

    The last record for a trace wins: a worker that crashed before its
    checkpoint observed the batch again, and its evidence holds the later one.
    """
    topic = settings.topics.auditor_observations
    decode = TurnEventDeserializer(shipped_catalog("auditor_observation"))
    found: dict[RecordedKey, tuple[Observation, ...]] = {}
    for msg in read_range(settings, topic, None, end_offsets(settings, topic), timeout=timeout):
        try:
            record = decode(msg.value()).event
        except Exception as exc:  # the decoder raises several types; a bad record is skipped
            log.warning("auditor_observation_undecodable", offset=msg.offset(), error=str(exc))
            continue
        if dict(record["auditor_id"]) != dict(auditor_id):
            continue
        key = (str(record["task_id"]), tuple(record["source"]["event_ids"]))
        found[key] = tuple(observation_from_record(o) for o in record["observations"])
    return found


def _verdict(value: Any) -> Verdict:
    if value not in ("alarm", "ok"):
        raise TurnAuditError(f"recorded verdict {value!r} is neither alarm nor ok")
    return "alarm" if value == "alarm" else "ok"


@dataclass
class RebuildResult:
    evidence: EvidenceFile
    replay: ReplaySummary
    traces: int
    partial_turns_skipped: int
    tally: EvidenceTally
    latencies_recorded: int = 0  # cases whose latencies are the live worker's
    latencies_measured: int = 0  # cases observed afresh (no record, or asked to)
    verdict_mismatches: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {
            "range": {
                "topic": self.replay.topic,
                "start": {str(p): o for p, o in sorted(self.replay.start.items())},
                "end": {str(p): o for p, o in sorted(self.replay.end.items())},
                "events": self.replay.events,
                "undecodable": self.replay.undecodable,
            },
            "traces": self.traces,
            "turns_of_tasks_begun_before_the_range": self.partial_turns_skipped,
            "cases": len(self.evidence.cases),
            "exclusions": {r: n for r, n in sorted(self.tally.excluded.items())},
            "unlabelled_traces": self.tally.unlabelled,
            "latencies_recorded": self.latencies_recorded,
            "latencies_measured": self.latencies_measured,
        }


def rebuild_evidence(
    settings: KafkaSettings,
    decode: TurnEventDeserializer,
    request: ReplayRequest,
    labels: Mapping[str, TaskLabel],
    auditor: PrefixAuditor,
    *,
    traces_path: Path,
    measure_latency: bool = False,
    timeout: float = 300.0,
) -> RebuildResult:
    """Traces and evidence re-derived from a range of the turn stream (see the module doc).

    Raises ``NotReproducedError`` when the re-run auditor disagrees with a
    recorded verdict, and ``AuditorIdentityError`` when the end-of-battery check fails:
    in both cases there is no evidence.
    """
    output = HtirFileReplayOutput(decode, traces_path)
    summary = replay(settings, decode, request, ReplayTarget.file("htir", traces_path),
                     timeout=timeout, outputs={"htir": lambda _context: output})
    # Exactly the record the live worker decodes from the traces topic.
    catalog = shipped_catalog("htir_trace")
    serialize, read = SingleObjectSerializer(catalog.latest), TurnEventDeserializer(catalog)
    traces = [HtirTrace.from_avro(read(serialize(t.to_avro())).event) for t in output.traces]

    builder = TraceEvidence(auditor, labels)
    pinned = builder.begin()
    recorded = {} if measure_latency else recorded_observations(settings, pinned.to_json())
    result = RebuildResult(EvidenceFile(pinned, ()), summary, len(traces),
                           output.trace_sink.partial_turns_skipped, builder.tally)
    for trace in traces:
        if builder.seen(trace.task_id):
            builder.tally.duplicates += 1
            continue
        admission = builder.admit(trace)
        if not admission.is_case:
            continue
        observations = builder.observe(trace)
        earlier = recorded.get((trace.task_id, tuple(trace.event_ids)))
        if earlier is None:
            result.latencies_measured += 1
        elif [(o.prefix_end, o.verdict, o.tier) for o in earlier] != [
            (o.prefix_end, o.verdict, o.tier) for o in observations
        ]:
            result.verdict_mismatches.append(trace.task_id)
        else:
            observations = earlier
            result.latencies_recorded += 1
        builder.add_case(trace, admission, observations)
    evidence = builder.finish()  # the end-of-battery identity check, before anything is written
    if result.verdict_mismatches:
        more = len(result.verdict_mismatches) - 5
        named = ", ".join(result.verdict_mismatches[:5]) + (f" and {more} more" if more > 0 else "")
        raise NotReproducedError(
            f"the re-run auditor {pinned.name} disagrees with its recorded verdicts on "
            f"{len(result.verdict_mismatches)} trace(s) ({named}): it does not reproduce; "
            "no evidence written"
        )
    result.evidence = evidence
    return result


def file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
