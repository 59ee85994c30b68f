"""The demo's evaluation stage: turn events -> HTIR feeder -> auditor worker -> gate.

The feeder runs as a consumer service over this run's turn events, with a
short idle timeout so tasks the simulation left unfinished close too. The
worker replays every trace's prefixes through the rule-based auditor; the
labels are the simulator's ground truth (scripted failure turns), which never
looks at the auditor. The gate then decides pass or hold on that evidence.
Then ``turnaudit eval rebuild``'s logic re-derives the evidence from the same
range of the turn stream; it must be the worker's file byte for byte. Last, the
report, evidence, feeder manifest, auditor identity and labels go into one
evidence bundle (``turnaudit eval bundle``), which must re-verify.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry

from turnaudit.commands.demo_summary import ReconciliationRow
from turnaudit.consumers.auditor_worker import AuditorEvaluationWorker
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.log_sink import service_logging
from turnaudit.consumers.replay.evidence import file_digest, rebuild_evidence
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings
from turnaudit.errors import TurnAuditError
from turnaudit.evaluation.auditors import RuleBasedAuditor
from turnaudit.evaluation.bundle import BundleInputs, check_bundle, make_bundle
from turnaudit.evaluation.files import write_json
from turnaudit.evaluation.gate import GateReport, evaluate
from turnaudit.evaluation.labels import labels_from_ground_truth
from turnaudit.files import private_dir
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.producers.simulator import GroundTruth
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.replay import CHECKPOINT_SUFFIX, ReplayRequest
from turnaudit.settings import KafkaSettings

DEFAULT_OUTPUT = Path("var/demo")
log = structlog.get_logger("turnaudit.demo")


@dataclass(frozen=True)
class EvaluationOutcome:
    rows: list[ReconciliationRow]
    report: GateReport
    evidence_path: Path
    report_path: Path
    manifest_path: Path
    bundle_path: Path
    # Labelled traces kept out of the evidence, by reason (each also in the
    # evidence's exclusions; e.g. a failing run whose trace ended before the
    # labelled failure turn cannot be scored honestly).
    left_out: dict[str, int]


def run_evaluation_stage(
    settings: KafkaSettings,
    truth: GroundTruth,
    timeout: float,
    *,
    start_offsets: Mapping[int, int],
    output_dir: Path = DEFAULT_OUTPUT,
    idle_timeout: float = 2.0,
    redaction: Redaction = DROPPED,
    log_level: str = "WARNING",
) -> EvaluationOutcome:
    private_dir(output_dir)
    manifest = output_dir / "htir-manifest.jsonl"
    manifest.unlink(missing_ok=True)
    traces_before = end_offsets(settings, settings.topics.htir_traces)
    turns_end = end_offsets(settings, settings.topics.turn_events)
    wanted = {p: e for p, e in turns_end.items() if e > start_offsets.get(p, 0)}
    run_id = uuid.uuid4().hex[:8]
    feeder_registry = CollectorRegistry()
    sink = HtirFeederSink(
        settings,
        registry=feeder_registry,
        idle_timeout=idle_timeout,
        manifest=manifest,
        redaction=redaction,
    )
    feeder = ConsumerService(
        ServiceSettings(ServiceName.HTIR_FEEDER, settings, f"turnaudit-demo-htir-{run_id}"),
        sink,
        registry=feeder_registry,
        start_offsets=start_offsets,
        serve_http=False,
    )
    deadline = time.monotonic() + timeout
    with service_logging(log_level):
        thread = threading.Thread(target=feeder.run, name="demo-htir-feeder")
        thread.start()
        try:
            # Done when every turn is consumed and no trace is left open: then
            # the held-back offsets have caught up with the end too.
            while time.monotonic() < deadline and not all(
                feeder.positions().get(p, 0) >= e for p, e in wanted.items()
            ):
                time.sleep(0.1)
        finally:
            feeder.stop()
            thread.join()

    labels = labels_from_ground_truth(truth.as_json())
    worker = AuditorEvaluationWorker(
        settings,
        RuleBasedAuditor(),
        labels,
        group_id=f"turnaudit-demo-auditor-{run_id}",
        registry=CollectorRegistry(),
        start_offsets=traces_before,
    )
    evidence = worker.run(
        until=lambda tally: tally.traces >= sink.published or time.monotonic() > deadline
    )
    evidence_path, report_path = output_dir / "evidence.json", output_dir / "gate-report.json"
    write_json(evidence_path, evidence.to_json())
    report = evaluate(evidence)
    write_json(report_path, report)
    rebuilt_path = output_dir / "evidence-rebuilt.json"
    rebuild = rebuild_evidence(
        settings,
        decoder_for(settings),
        ReplayRequest(RangeSpec(from_offsets=dict(start_offsets), to_offsets=turns_end)),
        labels,
        RuleBasedAuditor(),
        traces_path=_fresh(output_dir / "rebuilt-traces.htir.jsonl"),
        redaction=redaction,
    )
    write_json(rebuilt_path, rebuild.evidence.to_json())
    labels_path, bundle_path = output_dir / "labels.json", output_dir / "evidence-bundle.tar"
    write_json(labels_path, truth.as_json())
    bundle_verified = _bundle_verifies(
        BundleInputs(report_path, evidence_path, labels_path, (manifest,)), bundle_path
    )
    tally = worker.tally
    rows = [
        ReconciliationRow("HTIR traces published (one per task)", sink.published, len(truth.tasks)),
        ReconciliationRow("traces audited by the worker", tally.traces, sink.published),
        ReconciliationRow(
            "evidence cases (labelled, usable)",
            len(evidence.cases),
            tally.traces - tally.unusable_labels,
        ),
        ReconciliationRow(
            "evidence rebuilt from the stream: same sha256",
            int(file_digest(rebuilt_path) == file_digest(evidence_path)),
            1,
        ),
        ReconciliationRow(
            "evidence bundle re-verified, gate recomputed",
            int(bundle_verified),
            1,
        ),
    ]
    return EvaluationOutcome(
        rows,
        report,
        evidence_path,
        report_path,
        manifest,
        bundle_path,
        dict(sorted(tally.excluded.items())),
    )


def _bundle_verifies(inputs: BundleInputs, bundle_path: Path) -> bool:
    """Make the evidence bundle and re-verify it; a failure is a mismatch row, logged."""
    try:
        make_bundle(inputs, bundle_path)
        check_bundle(bundle_path)
    except TurnAuditError as exc:
        log.warning("demo_bundle_not_verified", error=str(exc))
        return False
    return True


def _fresh(path: Path) -> Path:
    """A replay output path with no checkpoint left by an earlier demo (another range)."""
    path.unlink(missing_ok=True)
    path.with_name(path.name + CHECKPOINT_SUFFIX).unlink(missing_ok=True)
    return path
