"""The consumer-side commands: topics create, sink, tail."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient

from turnaudit.cli import main
from turnaudit.kafka.topics import topic_specs
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker


def test_topics_create_makes_every_topic(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"cmd-{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PARTITIONS", "2")
    assert main(["topics", "create", "--wait", "30"]) == 0
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topics=TopicNames(prefix))
    assert f"{len(topic_specs(settings))} created" in capsys.readouterr().out
    topics = AdminClient(settings.client_config()).list_topics(timeout=10).topics
    assert sorted(topics[settings.topics.turn_events].partitions) == [0, 1]
    assert {spec.name for spec in topic_specs(settings)} <= set(topics)
    assert main(["topics", "create"]) == 0  # again: nothing to create, still fine
    assert "0 created" in capsys.readouterr().out
