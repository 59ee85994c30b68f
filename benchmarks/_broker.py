"""A broker for a benchmark run: the user's cluster, or a local one of its own."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalBrokerSettings, LocalKafkaBroker, free_ports
from turnaudit.settings import BOOTSTRAP_ENV, KafkaSettings
from turnaudit.topic_names import TopicNames

PROJECT_DIR = Path(__file__).resolve().parent.parent


@contextmanager
def benchmark_cluster(
    partitions: int = 6,
) -> Iterator[tuple[KafkaSettings, LocalKafkaBroker | None]]:
    """Settings with fresh topics; the local broker is started and stopped here."""
    external = os.environ.get(BOOTSTRAP_ENV)
    broker = None
    with tempfile.TemporaryDirectory(prefix="turnaudit-bench-") as home:
        if not external:
            ports = free_ports(2)
            broker = LocalKafkaBroker(
                LocalBrokerSettings(
                    home=Path(home),
                    jars_dir=PROJECT_DIR / "deploy/kafka/target/jars",
                    pom=PROJECT_DIR / "deploy/kafka/pom.xml",
                    port=ports[0],
                    controller_port=ports[1],
                )
            )
            broker.start()
        try:
            settings = KafkaSettings(
                bootstrap_servers=external or broker.bootstrap_servers,  # type: ignore[union-attr]  # broker is set when external is not
                topics=TopicNames(f"bench-{uuid.uuid4().hex[:8]}."),
                partitions=partitions,
            )
            ensure_topics(settings)
            yield settings, broker
        finally:
            if broker is not None:
                broker.stop()
