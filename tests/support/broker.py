"""The project's local KRaft broker, as the broker tier starts it."""

from __future__ import annotations

from pathlib import Path

from tests.support import PROJECT_ROOT
from turnaudit.local_broker import LocalBrokerSettings, free_ports


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
