"""The demo's trust rows: ``turnaudit verify --keyring FILE --require-signed`` over the
run, reconciled against the simulator and the publisher.

Every stream the simulator wrote with v3 or later (a chain of its own) must be judged
and ``signed``; every checkpoint the publisher had acknowledged must be read and valid;
every turn on the stream once, none lost, every one in the log sink's file; and verify's
exit code (0 only without a finding) 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnaudit.checkpoints import Keyring
from turnaudit.commands.demo_consumers import sample_total
from turnaudit.commands.demo_summary import ReconciliationRow
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.producers.simulator import GroundTruth
from turnaudit.serialization.decoders import decoder_for
from turnaudit.settings import KafkaSettings
from turnaudit.verify.run import run_verify

CHECKPOINTS_WRITTEN = "turnaudit_publisher_checkpoints_written_total"
CHECKPOINTS_UNSENT = "turnaudit_publisher_checkpoints_unsent"


def publisher_checkpoints(registry: CollectorRegistry) -> int:
    """Signed checkpoints the broker acknowledged, from the publisher's own metrics."""
    return sample_total(registry, CHECKPOINTS_WRITTEN)


def signed_rows(
    settings: KafkaSettings,
    start_offsets: Mapping[int, int],
    truth: GroundTruth,
    *,
    keyring: Keyring,
    keyring_path: Path,
    publisher: CollectorRegistry,
    log_file: Path | None = None,
) -> list[ReconciliationRow]:
    report = run_verify(
        settings,
        decoder_for(settings),
        RangeSpec(from_offsets=dict(start_offsets)),
        keyring=replace(keyring, require_signed=True),
        keyring_source=str(keyring_path),
        log_file=log_file,
    )
    trust = report.trust
    by_status = trust.by_status() if trust is not None else {}
    checkpoints = trust.as_json()["checkpoints"] if trust is not None else None
    streams = len(truth.chained_sessions)
    bad = "none"
    return [
        ReconciliationRow(
            "checkpoints signed by the publisher, all valid",
            checkpoints["valid"] if checkpoints else 0,
            publisher_checkpoints(publisher),
        ),
        ReconciliationRow(
            "streams judged (sessions written with v3 or later)",
            sum(by_status.values()),
            streams,
        ),
        ReconciliationRow("streams signed", by_status.get("signed", 0), streams),
        *(
            ReconciliationRow(f"streams {status}", by_status.get(status, 0), 0, bad, part)
            for status, part in (
                ("unsigned", "unsigned"),
                ("forged", "forged"),
                ("truncated", "truncated streams"),
            )
        ),
        ReconciliationRow(
            "invalid checkpoints",
            checkpoints["invalid"] if checkpoints else 0,
            0,
            bad,
            "invalid checkpoints",
        ),
        ReconciliationRow(
            "checkpoints waiting to be sent",
            sample_total(publisher, CHECKPOINTS_UNSENT),
            0,
            bad,
            "unsent checkpoints",
        ),
        ReconciliationRow("turns lost", report.verifier.lost_positions(), 0, bad, "turns lost"),
        ReconciliationRow(
            "turns verified on the stream", report.verifier.counts.turns, truth.events
        ),
        ReconciliationRow("verify --keyring --require-signed: exit code", 0 if report.ok else 1, 0),
    ]
