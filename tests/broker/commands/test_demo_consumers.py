"""The demo's consumer stage reconciles both services against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.streams import publish_simulated
from turnaudit.commands.demo_consumers import run_consumer_stage
from turnaudit.kafka.offsets import end_offsets
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def test_every_row_reconciles_on_a_second_run(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    # A first run on the topic: the second stage must read its own run only.
    publish_simulated(kafka_settings, 500, tmp_path / "spool-1", seed=2)
    before = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    truth = publish_simulated(kafka_settings, 2000, tmp_path / "spool-2", seed=3)
    log_file = tmp_path / "demo" / "turns.jsonl"
    rows = run_consumer_stage(
        kafka_settings, truth, truth.events, 120.0, start_offsets=before, log_file=log_file
    )
    assert [r for r in rows if not r.ok] == []
    labels = {r.label: r for r in rows}
    assert labels["log lines written"].observed == 2000
    assert labels["turns counted"].observed == 2000
    assert any(label.startswith("  refused, pack ") for label in labels)
    assert len(log_file.read_text().splitlines()) == 2000
    assert {json.loads(line)["event"] for line in log_file.read_text().splitlines()} == {"turn"}
