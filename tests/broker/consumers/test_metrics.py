"""Verdict metrics: counters equal the simulator's truth; labels from closed sets only."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.streams import (
    consumed_everything,
    publish_simulated,
    running,
    service_settings,
    wait_for,
)
from turnaudit.commands.demo_consumers import sample_total
from turnaudit.consumers.metrics import (
    verdict_metrics_service,
)
from turnaudit.consumers.runtime.settings import MetricsSettings, ServiceName
from turnaudit.kafka.offsets import end_offsets
from turnaudit.producers.simulator import PACKS
from turnaudit.settings import KafkaSettings
from turnaudit.verdicts import OutputPolicy

pytestmark = pytest.mark.broker


def test_counters_equal_the_simulators_truth_per_pack_and_output_policy(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    truth = publish_simulated(kafka_settings, 3000, tmp_path / "spool", seed=11)
    registry = CollectorRegistry()
    service = verdict_metrics_service(
        service_settings(
            kafka_settings,
            ServiceName.VERDICT_METRICS,
            "g-truth",
            metrics=MetricsSettings(packs=frozenset(PACKS)),
        ),
        registry=registry,
        serve_http=False,
    )
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with running(service):
        assert wait_for(consumed_everything(service, end))
    assert sample_total(registry, "turnaudit_turns_total") == truth.events
    assert sample_total(registry, "turnaudit_stub_turns_total") == truth.by_path["STUB"]
    for pack in PACKS:
        assert sample_total(registry, "turnaudit_turns_total", pack=pack) == truth.by_pack[pack]
        assert (
            sample_total(registry, "turnaudit_refused_turns_total", pack=pack)
            == truth.refused_by_pack[pack]
        )
        assert (
            sample_total(registry, "turnaudit_hedged_turns_total", pack=pack)
            == truth.hedged_by_pack[pack]
        )
    for policy in OutputPolicy:
        assert (
            sample_total(registry, "turnaudit_action_risk_total", output_policy=policy.value)
            == truth.by_output_policy[policy.value]
        )
    for tier, n in truth.by_risk_tier.items():
        assert sample_total(registry, "turnaudit_action_risk_total", risk_tier=tier) == n
    for version, n in truth.by_schema_version.items():
        assert sample_total(registry, "turnaudit_turns_total", schema_version=str(version)) == n
