"""Which cluster a command talks to: the user's, or the project's local broker."""

from __future__ import annotations

from turnaudit.kafka.local_broker import LocalKafkaBroker
from turnaudit.settings import KafkaSettings, LocalBrokerSettings


def connect(settings: KafkaSettings, *, start_local: bool) -> tuple[KafkaSettings, str]:
    """Settings with a bootstrap address, and a line saying where it points.

    ``KAFKA_BOOTSTRAP_SERVERS`` wins; otherwise the local broker is used,
    started first when ``start_local`` (the demo) and expected running otherwise.
    """
    if settings.bootstrap_servers:
        return settings, f"cluster at {settings.bootstrap_servers} (KAFKA_BOOTSTRAP_SERVERS)"
    broker = LocalKafkaBroker(LocalBrokerSettings.from_env())
    status = broker.start() if start_local else broker.status()
    where = f"local broker: {status.describe()}"
    return settings.with_bootstrap(broker.bootstrap_servers), where
