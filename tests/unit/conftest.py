"""The broker-free tier: a test here that reaches for Kafka or starts a JVM fails."""

from __future__ import annotations

import pytest

from turnaudit.local_broker import LocalKafkaBroker

NO_BROKER = "the unit tier has no broker: a test that needs one belongs in tests/broker/"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    pytest.fail(NO_BROKER)


@pytest.fixture(autouse=True)
def _no_local_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: LocalKafkaBroker) -> None:
        pytest.fail(NO_BROKER)

    monkeypatch.setattr(LocalKafkaBroker, "start", refuse)
