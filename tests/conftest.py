"""Session fixtures: one real Kafka broker per test session.

With ``KAFKA_BOOTSTRAP_SERVERS`` set the tests use that cluster; otherwise
they start the project's local KRaft broker on free ports in a temporary
folder. If it cannot start, the tests that need it fail: they never skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from turnaudit.kafka.local_broker import LocalKafkaBroker, free_ports
from turnaudit.kafka.topics import ensure_topics
from turnaudit.settings import BOOTSTRAP_ENV, KafkaSettings, LocalBrokerSettings, TopicNames

PROJECT_DIR = Path(__file__).resolve().parent.parent


def local_broker_settings(home: Path) -> LocalBrokerSettings:
    port, controller_port = free_ports(2)
    return LocalBrokerSettings(
        home=home,
        jars_dir=PROJECT_DIR / "deploy/kafka/target/jars",
        pom=PROJECT_DIR / "deploy/kafka/pom.xml",
        port=port,
        controller_port=controller_port,
        heap="512m",
    )


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        yield external
        return
    broker = LocalKafkaBroker(local_broker_settings(tmp_path_factory.mktemp("kafka")))
    broker.start()  # raises (and so fails the test) when it cannot start
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture
def kafka_settings(kafka_bootstrap: str) -> KafkaSettings:
    """Settings with topics under a prefix unique to this test, created."""
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topics=TopicNames(f"t-{uuid.uuid4().hex[:10]}."),
        partitions=3,
    )
    ensure_topics(settings)
    return settings


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    """A test that ran the CLI configured structlog for its own captured stderr."""
    yield
    structlog.reset_defaults()
