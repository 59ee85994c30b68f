"""Client configurations shared by the services that write to Kafka."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from turnaudit.settings import KafkaSettings

# What every project producer that must not lose or duplicate-on-retry needs.
RELIABLE_PRODUCER: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "log_level": 3,
}


def reliable_producer(kafka: KafkaSettings, **overrides: Any) -> Producer:
    """An idempotent, acks=all producer; user passthrough options apply underneath."""
    return Producer(kafka.client_config(**{**RELIABLE_PRODUCER, **overrides}))
