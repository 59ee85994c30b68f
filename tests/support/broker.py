"""The project's local KRaft broker, as the broker tier starts it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import PROJECT_ROOT
from turnaudit.local_broker import LocalBrokerSettings, LocalKafkaBroker, free_ports
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames


def local_broker_settings(home: Path) -> LocalBrokerSettings:
    port, controller_port = free_ports(2)
    return LocalBrokerSettings(
        home=home,
        jars_dir=PROJECT_ROOT / "deploy/kafka/target/jars",
        pom=PROJECT_ROOT / "deploy/kafka/pom.xml",
        port=port,
        controller_port=controller_port,
        heap="512m",
    )


@contextmanager
def broker_of_its_own(home: Path) -> Iterator[LocalKafkaBroker]:
    """A broker a test module starts for itself (its tests stop, hang or kill it), stopped
    at the end."""
    broker = LocalKafkaBroker(local_broker_settings(home))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@contextmanager
def hung_broker_settings() -> Iterator[KafkaSettings]:
    """Settings of a broker that hangs: a port that accepts the TCP connection and never
    answers (what a SIGSTOPped broker looks like to a client)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)  # the kernel completes connections; nobody ever reads
    port = server.getsockname()[1]
    try:
        yield KafkaSettings(bootstrap_servers=f"127.0.0.1:{port}", topics=TopicNames("u."))
    finally:
        server.close()
