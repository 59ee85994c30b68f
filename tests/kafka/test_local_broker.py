"""The local broker command and topic creation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from turnaudit.errors import BrokerError
from turnaudit.kafka.local_broker import free_port, free_ports
from turnaudit.kafka.topics import ensure_topics
from turnaudit.settings import KafkaSettings

PROJECT_DIR = Path(__file__).resolve().parents[2]


def broker_ports() -> dict[str, str]:
    port, controller = free_ports(2)
    return {"TURNAUDIT_BROKER_PORT": str(port), "TURNAUDIT_BROKER_CONTROLLER_PORT": str(controller)}


def turnaudit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnaudit.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_DIR,
        check=False,
        timeout=180,
    )


def broker_env(tmp_path: Path, path: str) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": path,
        "TURNAUDIT_BROKER_HOME": str(tmp_path / "home"),
        "TURNAUDIT_BROKER_JARS": str(tmp_path / "no-jars"),
        **broker_ports(),
    }


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    result = turnaudit(
        "broker", "start", env=broker_env(tmp_path, str(Path(sys.executable).parent))
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "turnaudit broker: java not found: "
        "install a Java 17+ runtime (apt-get install openjdk-17-jre-headless)"
    )


def test_missing_maven_is_one_clear_line(tmp_path: Path) -> None:
    java = shutil.which("java")
    assert java is not None, "the test machine needs java"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java)
    path = f"{bin_dir}:{Path(sys.executable).parent}"
    result = turnaudit("broker", "start", env=broker_env(tmp_path, path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "turnaudit broker: mvn not found: install Apache Maven (apt-get install maven)"
    )


@pytest.mark.broker
def test_broker_start_status_stop(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TURNAUDIT_BROKER_HOME": str(tmp_path / "home"),
        "TURNAUDIT_BROKER_JARS": str(PROJECT_DIR / "deploy/kafka/target/jars"),
        **broker_ports(),
        "TURNAUDIT_TOPIC_PREFIX": "cli-test.",
    }
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    try:
        assert turnaudit("broker", "status", env=env).returncode == 1
        started = turnaudit("broker", "start", env=env)
        assert started.returncode == 0, started.stderr
        assert "serving on 127.0.0.1:" + env["TURNAUDIT_BROKER_PORT"] in started.stdout
        assert "topics: 5 created under prefix 'cli-test.'" in started.stdout
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


@pytest.mark.broker
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
    assert len(created) == 5
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


@pytest.mark.broker
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
