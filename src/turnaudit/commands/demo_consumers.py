"""The demo's consumer stage: run the log sink and the verdict metrics in-process
until they have consumed the run, then reconcile what they wrote and counted
against the simulator's ground truth. Services given ``beside`` (the continuous
verifier) run in the same window, until each says it has settled.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry

from turnaudit.commands.demo_summary import ReconciliationRow
from turnaudit.consumers.log_sink import log_sink_service, service_logging
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import (
    LogSinkSettings,
    MetricsSettings,
    ServiceName,
    ServiceSettings,
)
from turnaudit.contracts import Contract
from turnaudit.dead_letters import read_dead_letter_headers
from turnaudit.files import private_dir
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.simulator import PACKS, GroundTruth
from turnaudit.records import record_headers
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.settings import KafkaSettings
from turnaudit.telemetry import (
    ACTION_RISK_TOTAL,
    CONTRACT_BREACHES_TOTAL,
    HEDGED_TURNS_TOTAL,
    LOG_LINES_TOTAL,
    REFUSED_TURNS_TOTAL,
    SEQUENCE_GAPS_TOTAL,
    STUB_TURNS_TOTAL,
    TURN_LOG_EVENT,
    TURNS_TOTAL,
)
from turnaudit.verdicts import OutputPolicy

DEFAULT_LOG_FILE = Path("var/demo/turns.jsonl")


class BesideService(Protocol):
    """A service run beside the two, and how to tell it is done with the run."""

    service: ConsumerService

    def settled(self) -> bool:
        """Asked at every poll while the services run (its figures are the last seen)."""
        ...


def sample_total(registry: CollectorRegistry, name: str, **labels: str) -> int:
    """Sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return int(total)


def run_consumer_stage(
    settings: KafkaSettings,
    truth: GroundTruth,
    published: int,
    timeout: float,
    *,
    start_offsets: Mapping[int, int] | None = None,
    log_file: Path = DEFAULT_LOG_FILE,
    redaction: Redaction = DROPPED,
    beside: Sequence[BesideService] = (),
    log_level: str = "WARNING",
) -> list[ReconciliationRow]:
    """Consume the run with both services and reconcile; rows say observed vs expected.

    ``start_offsets`` (partition -> offset, e.g. the end offsets taken before
    publishing) makes the services read this run only; without it they read
    the topic from the beginning. The log file is rewritten each run. The
    services' own log lines go through ``service_logging`` at ``log_level``.
    """
    topic = settings.topics.turn_events
    dlq_before = end_offsets(settings, settings.topics.dlq)
    end = end_offsets(settings, topic)
    start = dict(start_offsets or {})
    wanted = {p: e for p, e in end.items() if e > start.get(p, 0)}
    run_id = uuid.uuid4().hex[:8]
    private_dir(log_file.parent)
    log_file.unlink(missing_ok=True)
    log_settings = LogSinkSettings(redaction.policy, redaction.key, file=log_file)
    allowed = MetricsSettings(
        packs=frozenset(PACKS) | frozenset(truth.by_pack),
        domains=frozenset(d for domains in PACKS.values() for d in domains),
    )
    log_registry, metrics_registry = CollectorRegistry(), CollectorRegistry()

    def service_settings(service: ServiceName) -> ServiceSettings:
        return ServiceSettings(
            service=service,
            kafka=settings,
            group_id=f"turnaudit-demo-{service.value}-{run_id}",
            log=log_settings,
            metrics=allowed,
        )

    with service_logging(log_level):
        services: list[ConsumerService] = [
            log_sink_service(
                service_settings(ServiceName.LOG_SINK),
                registry=log_registry,
                start_offsets=start,
                serve_http=False,
            ),
            verdict_metrics_service(
                service_settings(ServiceName.VERDICT_METRICS),
                registry=metrics_registry,
                start_offsets=start,
                serve_http=False,
            ),
        ]
        running = services + [b.service for b in beside]
        threads = [
            threading.Thread(target=s.run, name=f"demo-{s.settings.service.value}") for s in running
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + timeout
        caught_up = 0
        try:
            while time.monotonic() < deadline:
                time.sleep(0.1)
                caught_up = sum(_caught_up(s.positions(), wanted) for s in services)
                settled = [b.settled() for b in beside]  # each looks every time: its figures
                if caught_up == len(services) and all(settled):
                    break
        finally:
            for service in running:
                service.stop()
            for thread in threads:
                thread.join()
    stages = {s.stage for s in services}
    return _reconcile(
        settings,
        truth,
        published=published,
        log_file=log_file,
        log_registry=log_registry,
        metrics_registry=metrics_registry,
        dlq_before=dlq_before,
        stages=stages,
        caught_up=caught_up,
    )


def _caught_up(positions: Mapping[int, int], wanted: Mapping[int, int]) -> bool:
    return all(positions.get(p, 0) >= e for p, e in wanted.items())


def _reconcile(
    settings: KafkaSettings,
    truth: GroundTruth,
    *,
    published: int,
    log_file: Path,
    log_registry: CollectorRegistry,
    metrics_registry: CollectorRegistry,
    dlq_before: Mapping[int, int],
    stages: set[str],
    caught_up: int,
) -> list[ReconciliationRow]:
    lines = 0
    ids: set[str] = set()
    for path in sorted(log_file.parent.glob(log_file.name + "*")):  # rotated files too
        with path.open(encoding="utf-8") as lines_file:
            for text in lines_file:
                line = json.loads(text)
                if line.get("event") == TURN_LOG_EVENT:
                    lines += 1
                    ids.add(line["event_id"])
    dead_letters = sum(
        read_dead_letter_headers(record_headers(msg)).get("stage") in stages
        for msg in read_range(
            settings, settings.topics.dlq, dlq_before, end_offsets(settings, settings.topics.dlq)
        )
    )
    m = metrics_registry
    log_lines = "log lines, one per turn"
    rows = [
        ReconciliationRow("services consumed to the end", caught_up, 2),
        ReconciliationRow("log lines written", lines, published, log_lines, "in the file"),
        ReconciliationRow(
            "distinct event ids in the log", len(ids), truth.events, log_lines, "distinct ids"
        ),
        ReconciliationRow(
            "log lines (sink counter)",
            sample_total(log_registry, LOG_LINES_TOTAL),
            published,
            log_lines,
            "sink counter",
        ),
        ReconciliationRow("turns counted", sample_total(m, TURNS_TOTAL), truth.events),
        ReconciliationRow(
            "refused turns counted",
            sample_total(m, REFUSED_TURNS_TOTAL),
            truth.refused,
            "counted",
            "refused",
        ),
        ReconciliationRow(
            "hedged turns counted",
            sample_total(m, HEDGED_TURNS_TOTAL),
            truth.hedged,
            "counted",
            "hedged",
        ),
        ReconciliationRow(
            "stub turns counted",
            sample_total(m, STUB_TURNS_TOTAL),
            truth.by_path["STUB"],
            "counted",
            "stub",
        ),
    ]
    for name, metric, by_pack in (
        ("turns", TURNS_TOTAL, truth.by_pack),
        ("refused", REFUSED_TURNS_TOTAL, truth.refused_by_pack),
        ("hedged", HEDGED_TURNS_TOTAL, truth.hedged_by_pack),
    ):
        rows += [
            ReconciliationRow(
                f"  {name}, pack {pack}",
                sample_total(m, metric, pack=pack),
                by_pack[pack],
                f"{name} per pack",
                pack,
            )
            for pack in sorted(truth.by_pack)
        ]
    rows += [
        ReconciliationRow(
            f"action risk {policy.value}",
            sample_total(m, ACTION_RISK_TOTAL, output_policy=policy.value),
            truth.by_output_policy[policy.value],
            "action risk",
            policy.value,
        )
        for policy in OutputPolicy
    ]
    none = "and none"
    rows += [
        ReconciliationRow(
            "contract breaches (consumers)",
            sum(sample_total(m, CONTRACT_BREACHES_TOTAL, contract=c.value) for c in Contract),
            0,
            none,
            "contract breaches",
        ),
        ReconciliationRow(
            "sequence gaps", sample_total(m, SEQUENCE_GAPS_TOTAL), 0, none, "sequence gaps"
        ),
        ReconciliationRow("dead letters (consumers)", dead_letters, 0, none, "dead letters"),
    ]
    return rows
