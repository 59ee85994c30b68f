"""The demo's stream rows: this run read back with a plain reader and counted the way the
simulator counted what it built (writer versions, v4's trace context and model identity,
paths), and everything that must be none (lost, gapped, undecodable, breaching)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from turnaudit.commands.demo_summary import ReconciliationRow
from turnaudit.contracts import SequenceOutcome, SessionSequenceTracker, check_event
from turnaudit.errors import SerializationError
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import CloseReport
from turnaudit.producers.simulator import GroundTruth
from turnaudit.serialization.decoders import decoder_for
from turnaudit.settings import KafkaSettings

CURRENT_VERSION = 4  # the runtime's default writer schema


def stream_rows(
    settings: KafkaSettings,
    *,
    before: Mapping[int, int],
    truth: GroundTruth,
    emitted: int,
    breached: int,
    report: CloseReport,
) -> list[ReconciliationRow]:
    """Read this run back (from ``before`` to the end) and reconcile it."""
    decode = decoder_for(settings)
    topic = settings.topics.turn_events
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    sequences = SessionSequenceTracker()
    for msg in read_range(settings, topic, dict(before), end_offsets(settings, topic)):
        try:
            decoded = decode(msg.value())
        except SerializationError:
            counts["undecodable"] += 1
            continue
        event = decoded.event
        if event["event_id"] in seen:
            continue
        seen.add(event["event_id"])
        counts[f"path {event['path']}"] += 1
        counts[f"v{decoded.writer_version}"] += 1
        counts["traced"] += event.get("trace_context") is not None
        counts["with model"] += event.get("model") is not None
        counts["breaches"] += bool(check_event(event))
        outcome = sequences.observe(event["session_id"], event["sequence"]).outcome
        counts["gaps"] += outcome is SequenceOutcome.GAP
    versions = sorted(set(truth.by_schema_version) | {CURRENT_VERSION})
    older = [v for v in versions if v != CURRENT_VERSION]
    older_group = "older writers, still read (" + "/".join(f"v{v}" for v in older) + ")"
    none = "none"
    return [
        ReconciliationRow("turns published", emitted, truth.events, "turns", "published"),
        ReconciliationRow(
            "turns read back, each event id once",
            len(seen),
            truth.events,
            "turns",
            "read back (each event id once)",
        ),
        ReconciliationRow(
            f"TurnEvent v{CURRENT_VERSION}, the runtime default",
            counts[f"v{CURRENT_VERSION}"],
            truth.by_schema_version[CURRENT_VERSION],
        ),
        ReconciliationRow(
            f"  v{CURRENT_VERSION} with a trace id (W3C trace context)",
            counts["traced"],
            truth.traced,
        ),
        ReconciliationRow(
            f"  v{CURRENT_VERSION} naming their model (main turns)",
            counts["with model"],
            truth.with_model,
        ),
        *(
            ReconciliationRow(
                f"written with schema v{v}",
                counts[f"v{v}"],
                truth.by_schema_version[v],
                older_group,
                f"v{v}",
            )
            for v in older
        ),
        ReconciliationRow(
            "main turns", counts["path MAIN"], truth.by_path["MAIN"], "paths", "main"
        ),
        ReconciliationRow(
            "stub turns", counts["path STUB"], truth.by_path["STUB"], "paths", "stub"
        ),
        ReconciliationRow("events lost", emitted - len(seen), 0, none, "lost"),
        ReconciliationRow("events left in the spool", report.undelivered, 0, none, "spooled"),
        ReconciliationRow("sequence gaps", counts["gaps"], 0, none, "gaps"),
        ReconciliationRow("undecodable messages", counts["undecodable"], 0, none, "undecodable"),
        ReconciliationRow(
            "contract breaches at the producer", breached, 0, none, "breaches (producer)"
        ),
        ReconciliationRow(
            "contract breaches read back", counts["breaches"], 0, none, "breaches (read back)"
        ),
    ]
