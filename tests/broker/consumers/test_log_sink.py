"""The log sink: one canonical JSON line per turn, redaction, outputs."""

from __future__ import annotations

import json
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
from turnaudit.consumers.log_sink import (
    log_sink_service,
    service_logging,
)
from turnaudit.consumers.runtime.settings import LogSinkSettings, ServiceName
from turnaudit.kafka.offsets import end_offsets
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def test_n_simulated_events_give_exactly_n_distinct_event_ids(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    truth = publish_simulated(kafka_settings, 2000, tmp_path / "spool")
    log_settings = LogSinkSettings(file=tmp_path / "turns.jsonl")
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with service_logging():
        service = log_sink_service(
            service_settings(kafka_settings, ServiceName.LOG_SINK, "g-logs", log=log_settings),
            registry=CollectorRegistry(),
            serve_http=False,
        )
        with running(service):
            assert wait_for(consumed_everything(service, end))
    lines = [json.loads(t) for t in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert len(lines) == truth.events
    assert len({line["event_id"] for line in lines}) == truth.events
    assert sum(line["refusal_emitted"] for line in lines) == truth.refused
    assert sum(line["hedge_injected"] for line in lines) == truth.hedged
