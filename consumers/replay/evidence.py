"""EVR-6 evidence rebuilt from the turn stream: ``turnaudit eval rebuild``.

``rebuild_evidence`` replays the range into traces (``htir:``, nothing joined
or committed), each trace through the same Avro record the live worker reads,
then the auditor worker's evidence logic (``TraceEvidence``) with the same
labels and pinned auditor. The auditor is run again on every prefix of every
case; where the live worker recorded observations for the same trace
(``<prefix>auditor-observations``, same task, same turns, same auditor
identity) the re-derived verdicts must equal the recorded ones, and the
recorded latencies are kept (a latency is a measurement, not something a
replay can re-derive), so the rebuilt file is byte-identical to the live
worker's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import structlog

from turnaudit.consumers.replay.htir import HtirFileReplayOutput
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
from turnaudit.htir import HtirTrace
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.replay.request import ReplayRequest, ReplayTarget
from turnaudit.replay.run import ReplaySummary, replay
from turnaudit.sealing.opening import TurnOpener
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.replay_htir")


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


class RebuiltRange(TypedDict):
    topic: str
    start: dict[str, int]
    end: dict[str, int]
    events: int
    undecodable: int


class RebuildDescription(TypedDict):
    """What `turnaudit eval rebuild` prints: the range, the traces and the cases."""

    range: RebuiltRange
    traces: int
    turns_of_tasks_begun_before_the_range: int
    cases: int
    exclusions: dict[str, int]
    unlabelled_traces: int
    latencies_recorded: int
    latencies_measured: int


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

    def describe(self) -> RebuildDescription:
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
    redaction: Redaction = DROPPED,
    opener: TurnOpener | None = None,
) -> RebuildResult:
    """Traces and evidence re-derived from a range of the turn stream (see the module doc).

    Raises ``NotReproducedError`` when the re-run auditor disagrees with a
    recorded verdict, and ``AuditorIdentityError`` when the end-of-battery check fails:
    in both cases there is no evidence. ``redaction``: the live feeder's surface policy,
    so the rebuilt traces (and the evidence holding them) are the same bytes; ``opener``:
    the feeder's too (``turnaudit.sealing.opening.turn_opener``), for sealed turns.
    """
    output = HtirFileReplayOutput(decode, traces_path, redaction, opener)
    request = replace(request, surfaces=redaction)
    summary = replay(
        settings,
        decode,
        request,
        ReplayTarget.file("htir", traces_path),
        timeout=timeout,
        outputs={"htir": lambda _context: output},
    )
    # Exactly the record the live worker decodes from the traces topic.
    catalog = shipped_catalog("htir_trace")
    serialize, read = SingleObjectSerializer(catalog.latest), TurnEventDeserializer(catalog)
    traces = [HtirTrace.from_avro(read(serialize(t.to_avro())).event) for t in output.traces]

    builder = TraceEvidence(auditor, labels)
    pinned = builder.begin()
    recorded = {} if measure_latency else recorded_observations(settings, pinned.to_json())
    result = RebuildResult(
        EvidenceFile(pinned, ()),
        summary,
        len(traces),
        output.trace_sink.partial_turns_skipped,
        builder.tally,
    )
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
