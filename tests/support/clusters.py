"""The project's local broker as a secured single node or a three-node cluster, for
the tests that need one of their own (free ports, a temporary folder). If it
cannot start, the test fails: it never skips."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import PROJECT_ROOT
from turnaudit.kafka.acls import apply_acls, plan_acls
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import (
    LOCAL_SUBSCRIBERS,
    LocalBrokerSettings,
    LocalKafkaBroker,
    free_ports,
)
from turnaudit.settings import KafkaSettings, TopicNames


def cluster_settings(
    home: Path, *, nodes: int = 1, security: str = "plaintext"
) -> LocalBrokerSettings:
    ports = free_ports(2 * nodes)
    return LocalBrokerSettings(
        home=home,
        jars_dir=PROJECT_ROOT / "deploy/kafka/target/jars",
        pom=PROJECT_ROOT / "deploy/kafka/pom.xml",
        port=ports[0],
        controller_port=ports[nodes],
        heap="400m",
        nodes=nodes,
        security=security,
        ports=tuple(ports[:nodes]),
        controller_ports=tuple(ports[nodes:]),
    )


@contextmanager
def running(settings: LocalBrokerSettings) -> Iterator[LocalKafkaBroker]:
    broker = LocalKafkaBroker(settings)
    try:
        broker.start(timeout=180)
        yield broker
    finally:
        broker.stop()


def admin_settings(broker: LocalKafkaBroker, prefix: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=broker.bootstrap_servers,
        topics=TopicNames(prefix),
        partitions=3,
        security=broker.security(),
        connect_timeout_s=10,
    )


def secure_setup(broker: LocalKafkaBroker, prefix: str) -> KafkaSettings:
    """The planned ACLs and the topics under ``prefix``, as the admin."""
    admin = admin_settings(broker, prefix)
    apply_acls(
        admin.client_config({"log_level": 0}), plan_acls(prefix, subscribers=LOCAL_SUBSCRIBERS)
    )
    ensure_topics(admin, strict=True)
    return admin


def principal_env(broker: LocalKafkaBroker, user: str, prefix: str, **extra: str) -> dict[str, str]:
    """A clean environment for a ``turnaudit`` process acting as ``user``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TURNAUDIT_") and k != "KAFKA_BOOTSTRAP_SERVERS"
    }
    env |= broker.client_env(user)
    env |= {
        "TURNAUDIT_TOPIC_PREFIX": prefix,
        "TURNAUDIT_TOPIC_PARTITIONS": "3",
        "TURNAUDIT_CONNECT_TIMEOUT_S": "8",
        "TURNAUDIT_GROUP_INSTANCE_ID": "none",
        **extra,
    }
    return env


def reconciled(stdout: str, returncode: int) -> bool:
    """``verify`` found every turn: exit 0; or exit 1 whose only unexplained findings are
    ``lost_in_crash`` from ``<prefix>stream-heads`` while the stream itself says ``lost 0``
    (verify's stream-heads reading reports those for a publisher that closed cleanly, on
    a plaintext single broker too: not a loss this cluster's setup causes)."""
    if returncode == 0:
        return True
    summary = [line for line in stdout.splitlines() if "unexplained finding(s):" in line]
    return (
        returncode == 1
        and "lost 0," in stdout
        and len(summary) == 1
        and summary[0].split(":", 2)[-1].split() == ["lost_in_crash", summary[0].split()[-1]]
    )
