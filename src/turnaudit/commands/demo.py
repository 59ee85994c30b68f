"""``turnaudit demo``: the pipeline end to end on the local broker, summarised.

Stages: simulate and publish; read the stream back; run the log sink and the
verdict metrics over it; assemble HTIR traces, replay them through the
rule-based auditor and apply the EVR-6 gate. Every figure is reconciled
against the simulator's ground truth; the exit code is 0 only when all match
(the gate's own decision is reported, and a hold is a result, not a failure).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from turnaudit.cluster import connect
from turnaudit.commands.demo_consumers import ReconciliationRow, run_consumer_stage
from turnaudit.commands.demo_evaluation import run_evaluation_stage
from turnaudit.commands.simulate import add_simulation_arguments, publish_simulation
from turnaudit.commands.verify import demo_rows as verify_demo_rows
from turnaudit.contracts import SequenceOutcome, SessionSequenceTracker, check_event
from turnaudit.errors import SerializationError
from turnaudit.evaluation.gate import GateReport
from turnaudit.evaluation.trace_evidence import ExclusionReason
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.publisher import CloseReport
from turnaudit.producers.simulator import GroundTruth
from turnaudit.redaction import surface_redaction
from turnaudit.serialization.decoders import decoder_for
from turnaudit.settings import KafkaSettings

OUTPUT_DIR = Path("var/demo")


# Why the evaluation kept a labelled trace out, in words.
_LEFT_OUT: dict[str, str] = {
    ExclusionReason.LABEL_STEP_NOT_IN_TRACE: "a failing run whose trace ended before the "
    "labelled failure turn (not scorable)",
    ExclusionReason.LABEL_TRACE_CHANGED: "the trace differs from the one the label was reviewed on",
    ExclusionReason.TRACE_MISSING_TURNS: "the trace misses a middle turn",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the pipeline end to end on the local broker and print a summary"
    )
    add_simulation_arguments(parser)
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds each consumer stage may take"
    )
    parser.set_defaults(handler=_demo, spool_dir=OUTPUT_DIR / "spool")


def _print_section(title: str, rows: list[ReconciliationRow]) -> None:
    print(f"\n{title}")
    print(f"  {'':<44} {'observed':>9} {'expected':>9}")
    for row in rows:
        mark = "ok" if row.ok else "MISMATCH"
        print(f"  {row.label:<44} {row.observed:>9} {row.expected:>9}  {mark}")


def _stream_rows(
    settings: KafkaSettings,
    *,
    before: dict[int, int],
    truth: GroundTruth,
    emitted: int,
    breached: int,
    report: CloseReport,
) -> list[ReconciliationRow]:
    """Read this run back with a plain reader and count it like the simulator did."""
    decode = decoder_for(settings)
    topic = settings.topics.turn_events
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    sequences = SessionSequenceTracker()
    for msg in read_range(settings, topic, before, end_offsets(settings, topic)):
        counts["messages"] += 1
        try:
            decoded = decode(msg.value())
        except SerializationError:
            counts["undecodable"] += 1
            continue
        event = decoded.event
        if event["event_id"] in seen:
            counts["duplicates"] += 1
            continue
        seen.add(event["event_id"])
        counts[f"path {event['path']}"] += 1
        counts[f"v{decoded.writer_version}"] += 1
        counts["breaches"] += bool(check_event(event))
        outcome = sequences.observe(event["session_id"], event["sequence"]).outcome
        counts["gaps"] += outcome is SequenceOutcome.GAP
    rows = [
        ReconciliationRow("turns published", emitted, truth.events),
        ReconciliationRow("distinct event ids read back", len(seen), truth.events),
        ReconciliationRow("main turns", counts["path MAIN"], truth.by_path["MAIN"]),
        ReconciliationRow("stub turns", counts["path STUB"], truth.by_path["STUB"]),
    ]
    rows += [
        ReconciliationRow(f"written with schema v{v}", counts[f"v{v}"], n)
        for v, n in sorted(truth.by_schema_version.items())
    ]
    rows += [
        ReconciliationRow("contract breaches at the producer", breached, 0),
        ReconciliationRow("contract breaches read back", counts["breaches"], 0),
        ReconciliationRow("sequence gaps", counts["gaps"], 0),
        ReconciliationRow("undecodable messages", counts["undecodable"], 0),
        ReconciliationRow("events left in the spool", report.undelivered, 0),
        ReconciliationRow("events lost", emitted - len(seen), 0),
    ]
    return rows


def _gate_lines(report: GateReport) -> list[str]:
    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    overall = report["overall"]
    auditor = report["auditor_id"]
    pinned = "none pinned" if auditor is None else f"{auditor['name']} {auditor['digest'][:19]}…"
    lines = [
        f"  decision: {report['decision'].upper()}   auditor {pinned}",
        f"  overall: {overall['traces']} traces ({overall['alarm_positive']} alarm-positive, "
        f"{overall['healthy']} healthy), precision {pct(overall['precision'])}, early-alarm "
        f"recall {pct(overall['early_alarm_recall'])}, false-alarm rate "
        f"{pct(overall['false_alarm_rate'])}, late {overall['late_alarms']}, "
        f"p95 latency {overall['p95_latency_ms']:.3f} ms",
    ]
    for name, fam in sorted(report["families"].items()):
        lines.append(
            f"  {name:<14} {fam['traces']:>3} traces ({fam['alarm_positive']}+/{fam['healthy']}-)"
            f"  recall {pct(fam['early_alarm_recall'])}  false alarms "
            f"{pct(fam['false_alarm_rate'])}"
        )
    lines += [
        f"  failed: {f['requirement']} [{f['scope']}] {f.get('detail', '')}"
        for f in report["failed_requirements"]
    ]
    return lines


def _demo(args: argparse.Namespace) -> int:
    settings, where = connect(KafkaSettings.from_env(), start_local=True)
    print(f"turn-audit demo: {where}")
    ensure_topics(settings)
    before = end_offsets(settings, settings.topics.turn_events)

    sim, report, emitter, elapsed = publish_simulation(settings, args)
    truth = sim.truth
    print(
        f"published {emitter.emitted} simulated turns in {elapsed:.1f}s from "
        f"{len(truth.sessions)} sessions (seed {args.seed}, schema versions "
        f"{','.join(map(str, args.schema_versions))}), {len(truth.tasks)} tasks"
    )
    sections = [
        (
            "the stream, read back",
            _stream_rows(
                settings,
                before=before,
                truth=truth,
                emitted=emitter.emitted,
                breached=emitter.breached,
                report=report,
            )
            # Ends with turnaudit verify's verdict on this run's range.
            + verify_demo_rows(settings, before, truth.events),
        ),
        (
            "consumer services: log sink and verdict metrics",
            run_consumer_stage(
                settings,
                truth,
                emitter.emitted,
                args.timeout,
                start_offsets=before,
                log_file=OUTPUT_DIR / "turns.jsonl",
                redaction=surface_redaction(),
            ),
        ),
    ]
    evaluation = run_evaluation_stage(
        settings,
        truth,
        args.timeout,
        start_offsets=before,
        output_dir=OUTPUT_DIR,
        redaction=surface_redaction(),
    )
    sections.append(("HTIR traces and the auditor-evaluation worker", evaluation.rows))
    for title, rows in sections:
        _print_section(title, rows)
    print("\nEVR-6 gate (labels: the simulator's scripted failure turns; auditor: rule-based)")
    print("\n".join(_gate_lines(evaluation.report)))
    for reason, count in evaluation.left_out.items():
        print(f"  left out: {count} labelled trace(s), {_LEFT_OUT.get(reason, reason)}")
    print(
        f"\nfiles: {OUTPUT_DIR / 'turns.jsonl'} (log lines), {evaluation.manifest_path}, "
        f"{evaluation.evidence_path}, {evaluation.report_path}"
    )
    mismatches = [row.label for _, rows in sections for row in rows if not row.ok]
    if mismatches:
        print(f"\ndemo: MISMATCH in {len(mismatches)} row(s): {', '.join(mismatches)}")
        return 1
    print("\ndemo: every event accounted for; gate decision: " + evaluation.report["decision"])
    return 0
