"""The layers' lists, written once: the pure modules and what counts as I/O.

tests/unit/test_layering.py holds every module of ``PURE`` away from ``IO``;
tests/unit/replay/test_purity.py holds replay's pure core (``PURE``'s replay
modules) away from replay's own reading and running modules as well.
"""

from __future__ import annotations

# Modules with no I/O: what they import from Kafka's side is a mistake.
PURE = (
    "src/turnaudit/chain.py",
    "src/turnaudit/checkpoints.py",
    "src/turnaudit/contracts.py",
    "src/turnaudit/dead_letters.py",
    "src/turnaudit/dlq.py",
    "src/turnaudit/dlq_redrive.py",
    "src/turnaudit/events.py",
    "src/turnaudit/htir.py",
    "src/turnaudit/htir_steps.py",
    "src/turnaudit/identity.py",
    "src/turnaudit/label_bounds.py",
    "src/turnaudit/records.py",
    "src/turnaudit/stamping.py",
    "src/turnaudit/stream_tracking.py",
    "src/turnaudit/telemetry.py",
    "src/turnaudit/verdicts.py",
    "src/turnaudit/verify/counts.py",
    "src/turnaudit/verify/crash.py",
    "src/turnaudit/verify/findings.py",
    "src/turnaudit/verify/reconciliation.py",
    "src/turnaudit/verify/report.py",
    "src/turnaudit/verify/trust.py",
    "src/turnaudit/verify/verifier.py",
    "src/turnaudit/archive/segments.py",
    "src/turnaudit/archive/digests.py",
    "src/turnaudit/replay/canonical.py",
    "src/turnaudit/replay/checkpoint.py",
    "src/turnaudit/replay/files.py",
    "src/turnaudit/replay/jsonl.py",
    "src/turnaudit/replay/order.py",
    "src/turnaudit/replay/outputs.py",
    "consumers/runtime/handover.py",
    "consumers/runtime/ledger.py",
    "consumers/runtime/sink.py",
)
IO = (
    "turnaudit.kafka",
    "confluent_kafka",
    "urllib",
    "http",
    "socket",
    "turnaudit.verify.files",
    "turnaudit.verify.scrape",
    "turnaudit.verify.kafka_reads",
    "turnaudit.verify.run",
)
