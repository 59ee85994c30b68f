"""Which cluster a command talks to: the user's, or the project's local broker."""

from __future__ import annotations

from turnaudit.kafka.topics import CLUSTER_HINT, LOCAL_BROKER_HINT, require_cluster
from turnaudit.local_broker import LocalKafkaBroker
from turnaudit.settings import KafkaSettings, LocalBrokerSettings


def connect(
    settings: KafkaSettings, *, start_local: bool, wait: float | None = None, require: bool = True
) -> tuple[KafkaSettings, str]:
    """Settings with a bootstrap address that answers, and a line saying where it points.

    ``KAFKA_BOOTSTRAP_SERVERS`` wins; otherwise the local broker is used,
    started first when ``start_local`` (the demo) and expected running otherwise.
    A cluster that does not answer within ``wait`` seconds (default: the
    settings' connect timeout) ends the command with one line saying so, unless
    ``require`` is false: a long-running service starts anyway, reports itself
    not ready and says so in its log until the cluster answers.
    """
    if settings.bootstrap_servers:
        if require:
            require_cluster(settings, wait=wait, hint=CLUSTER_HINT)
        return settings, f"cluster at {settings.bootstrap_servers} (KAFKA_BOOTSTRAP_SERVERS)"
    broker = LocalKafkaBroker(LocalBrokerSettings.from_env())
    status = broker.start() if start_local else broker.status()
    where = f"local broker: {status.describe()}"
    local = settings.with_bootstrap(broker.bootstrap_servers)
    if require:
        require_cluster(local, wait=wait, hint=LOCAL_BROKER_HINT)
    return local, where
