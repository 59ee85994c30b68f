"""A replay beside a live verdict-metrics service leaves its counters and group offsets alone."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from tests.consumers.streams import (
    consumed_everything,
    publish_simulated,
    running,
    service_settings,
    wait_for,
)
from tests.consumers.test_metrics import counter_samples
from turnaudit.consumers.metrics import VerdictMetricsService
from turnaudit.consumers.replay import MetricsReplayOutput
from turnaudit.consumers.settings import ServiceName
from turnaudit.kafka.reading import end_offsets
from turnaudit.replay import ReplayRequest, ReplayTarget, replay
from turnaudit.serialization.decoders import decoder_for
from turnaudit.settings import KafkaSettings


def committed(settings: KafkaSettings, group: str) -> dict[int, int]:
    topic = settings.topics.turn_events
    probe = Consumer(settings.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        probe.close()


@pytest.mark.broker
def test_live_counters_and_group_offsets_unchanged_by_a_replay(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    truth = publish_simulated(kafka_settings, 400, tmp_path / "spool", seed=5)
    group = f"live-{uuid.uuid4().hex[:8]}"
    registry = CollectorRegistry()
    service = VerdictMetricsService(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, group),
        registry=registry, serve_http=False,
    )
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with running(service):
        assert wait_for(consumed_everything(service, end))
        assert wait_for(lambda: committed(kafka_settings, group) == end)
        counters, offsets = counter_samples(registry), committed(kafka_settings, group)
        live_turns = sum(v for (name, _), v in counters.items() if name == "turnaudit_turns_total")
        assert live_turns == truth.events

        decode = decoder_for(kafka_settings)
        summary = replay(kafka_settings, decode, ReplayRequest(),
                         ReplayTarget.file("jsonl", tmp_path / "r.jsonl"))
        assert summary.events == truth.events
        replay(kafka_settings, decode, ReplayRequest(),
               ReplayTarget.file("metrics", tmp_path / "r.om"),
               outputs={"metrics": lambda c: MetricsReplayOutput(decode, "test", c.target.path)})
        assert "turnaudit_turns_total{" in (tmp_path / "r.om").read_text(encoding="utf-8")
        time.sleep(2)  # a few more polls of the live service
        assert counter_samples(registry) == counters
        assert committed(kafka_settings, group) == offsets
