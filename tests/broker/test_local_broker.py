"""The local broker command and topic creation."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from tests.support import PROJECT_ROOT
from tests.support.cli import broker_ports, run_turnaudit
from turnaudit.errors import BrokerError
from turnaudit.kafka.topics import ensure_topics, topic_specs
from turnaudit.local_broker import free_port
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

turnaudit = partial(run_turnaudit, cwd=PROJECT_ROOT, timeout=180)


def test_broker_start_status_stop(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TURNAUDIT_BROKER_HOME": str(tmp_path / "home"),
        "TURNAUDIT_BROKER_JARS": str(PROJECT_ROOT / "deploy/kafka/target/jars"),
        **broker_ports(),
        "TURNAUDIT_TOPIC_PREFIX": "cli-test.",
    }
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    try:
        assert turnaudit("broker", "status", env=env).returncode == 1
        started = turnaudit("broker", "start", env=env)
        assert started.returncode == 0, started.stderr
        assert "serving on 127.0.0.1:" + env["TURNAUDIT_BROKER_PORT"] in started.stdout
        planned = len(topic_specs(KafkaSettings(topics=TopicNames("cli-test."))))
        assert f"topics: {planned} created under prefix 'cli-test.'" in started.stdout
        again = turnaudit("broker", "start", env=env)  # idempotent: already serving
        assert again.returncode == 0
        assert "topics: 0 created" in again.stdout
        status = turnaudit("broker", "status", env=env)
        assert status.returncode == 0
        assert "running (pid" in status.stdout
        assert (tmp_path / "home" / "data" / "meta.properties").exists()
    finally:
        stopped = turnaudit("broker", "stop", env=env)
    assert stopped.returncode == 0
    assert "kafka: stopped" in stopped.stdout
    assert turnaudit("broker", "status", env=env).returncode == 1


def test_topics_carry_the_configured_layout(kafka_bootstrap: str) -> None:
    settings = KafkaSettings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "TURNAUDIT_TOPIC_PREFIX": f"layout-{free_port()}.",
            "TURNAUDIT_TOPIC_PARTITIONS": "4",
            "TURNAUDIT_TURN_EVENTS_RETENTION_HOURS": "1000",
        }
    )
    created = ensure_topics(settings)
    assert sorted(created) == sorted(s.name for s in topic_specs(settings))  # the whole plan
    assert ensure_topics(settings) == []  # idempotent
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert len(topics[settings.topics.turn_events].partitions) == 4
    assert len(topics[settings.topics.schemas].partitions) == 1
    resources = [
        ConfigResource(ResourceType.TOPIC, settings.topics.turn_events),
        ConfigResource(ResourceType.TOPIC, settings.topics.schemas),
    ]
    described = {r.name: f.result(timeout=10) for r, f in admin.describe_configs(resources).items()}
    assert described[settings.topics.turn_events]["retention.ms"].value == str(1000 * 3_600_000)
    assert described[settings.topics.schemas]["cleanup.policy"].value == "compact"


def test_an_existing_schemas_topic_that_deletes_records_is_refused(kafka_bootstrap: str) -> None:
    settings = KafkaSettings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "TURNAUDIT_TOPIC_PREFIX": f"wrong-{free_port()}.",
        }
    )
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    future = admin.create_topics(
        [
            NewTopic(
                settings.topics.schemas,
                num_partitions=1,
                replication_factor=1,
                config={"cleanup.policy": "delete"},
            )
        ]
    )[settings.topics.schemas]
    future.result(timeout=30)
    with pytest.raises(BrokerError, match=r"cleanup\.policy=delete, the pipeline needs compact"):
        ensure_topics(settings)
