"""Session fixtures and the two test tiers.

``tests/unit/`` runs with Python and the native crate only (tests/unit/conftest.py
refuses the broker and the programs ``make test-fast`` does not provide);
``tests/broker/`` holds what needs the real Kafka broker (one per test session,
started here when a test asks for it, or the cluster ``KAFKA_BOOTSTRAP_SERVERS``
names) or another real program. If a part cannot start, the tests that need it
fail: they never skip.

Where a test lives and whether it carries the ``broker`` mark must agree, and
a test that uses the broker fixtures must carry it: the collection hook below
refuses anything else, so ``pytest tests/unit`` (``make test-fast``) never
reaches for Kafka.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.support.broker import local_broker_settings
from tests.support.examples import EDIT_LOOP, draw_the_edit_loops_share
from tests.support.registry import local_registry_settings
from tests.support.tiers import tier_violations
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker
from turnaudit.local_registry import LocalSchemaRegistry
from turnaudit.settings import BOOTSTRAP_ENV, KafkaSettings
from turnaudit.topic_names import TopicNames

TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = tier_violations(items, TESTS)
    if problems:
        raise pytest.UsageError("tests in the wrong tier:\n  " + "\n  ".join(problems))
    if config.getoption("hypothesis_profile", None) == EDIT_LOOP:
        draw_the_edit_loops_share(items)


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


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSchemaRegistry]:
    """The real schema registry (Apicurio Registry, ``make registry``) for registry mode,
    one per test session on free loopback ports; tests keep apart by their topic prefix
    (the subject is ``<prefix>turn-events-value``)."""
    registry = LocalSchemaRegistry(local_registry_settings(tmp_path_factory.mktemp("registry")))
    registry.start()  # raises (and so fails the test) when it cannot start
    try:
        yield registry
    finally:
        registry.stop()


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
