"""Verdict metrics: counters equal the simulator's truth; labels from closed sets only."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.consumers.events import encode, turn
from tests.consumers.streams import (
    consumed_everything,
    publish_simulated,
    running,
    service_settings,
    wait_for,
)
from turnaudit.consumers.demo_stage import sample_total
from turnaudit.consumers.metrics import OTHER, VerdictMetricsService, VerdictMetricsSink
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.settings import MetricsSettings, ServiceName
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.kafka.reading import end_offsets
from turnaudit.producers.simulator import PACKS
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verdicts import OutputPolicy

DECODE = TurnEventDeserializer(shipped_catalog())


def consumed(
    event: dict[str, object],
    outcome: SequenceOutcome = SequenceOutcome.IN_ORDER,
) -> ConsumedTurn:
    return ConsumedTurn(DECODE(encode(event)), SequenceCheck(outcome), "t", 0, 0)


def series(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in registry.collect()
        for s in family.samples
    }


def test_a_flood_of_new_pack_and_domain_ids_adds_no_series() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(packs=frozenset({"medical"})), registry)
    sink.write([consumed(turn("s-a", 0, pack="medical"))])
    sink.write([consumed(turn(f"s-{n}", 0, pack=f"pack-{n}")) for n in range(100)])
    after_100 = series(registry)
    sink.write([consumed(turn(f"s-{n}", 0, pack=f"pack-{n}")) for n in range(100, 300)])
    assert series(registry) == after_100
    packs = {dict(labels).get("pack") for _, labels in after_100} - {None}
    assert packs == {"medical", OTHER}
    assert sample_total(registry, "turnaudit_turns_total", pack=OTHER) == 300
    assert sample_total(registry, "turnaudit_turns_total", domain=OTHER) == 301


def test_a_recognised_redelivery_is_not_counted_twice() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(), registry)
    event = turn(
        "s-dup",
        0,
        refusal_emitted=True,
        surface="[refusal] no",
        surface_before_hedge="[refusal] no",
    )
    sink.write([consumed(event), consumed(event, SequenceOutcome.DUPLICATE)])
    assert sample_total(registry, "turnaudit_turns_total") == 1
    assert sample_total(registry, "turnaudit_refused_turns_total") == 1


def test_delay_from_the_turns_time_to_counted_is_observed() -> None:
    registry = CollectorRegistry()
    occurred = datetime(2026, 11, 1, tzinfo=UTC)
    sink = VerdictMetricsSink(
        MetricsSettings(), registry, clock=lambda: occurred.timestamp() + 0.04
    )
    sink.write(
        [
            consumed(
                turn(
                    "s-delay",
                    0,
                )
                | {"occurred_at": int(occurred.timestamp() * 1000)}
            )
        ]
    )
    assert (
        registry.get_sample_value("turnaudit_turn_count_delay_seconds_bucket", {"le": "0.03"}) == 0
    )
    assert (
        registry.get_sample_value("turnaudit_turn_count_delay_seconds_bucket", {"le": "0.05"}) == 1
    )


@pytest.mark.broker
def test_counters_equal_the_simulators_truth_per_pack_and_output_policy(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    truth = publish_simulated(kafka_settings, 3000, tmp_path / "spool", seed=11)
    registry = CollectorRegistry()
    service = VerdictMetricsService(
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
