"""Client configurations shared by the services that write to Kafka."""

from __future__ import annotations

from typing import Any

import structlog
from confluent_kafka import KafkaError, Message, Producer

from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.kafka")

# Delivery guarantees: idempotent, acknowledged by all replicas, retried until
# delivered (a broker outage delays, never fails, a message).
RELIABLE_PRODUCER: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "message.timeout.ms": 0,
}
PRODUCER_DEFAULTS: dict[str, Any] = {"linger.ms": 5, "log_level": 3}


class ReliableProducer:
    """A producer whose ``flush`` result can be trusted: it says how many
    messages are still queued *or* failed, so "0" means every one was stored."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._producer = Producer(
            kafka.client_config(
                PRODUCER_DEFAULTS, **RELIABLE_PRODUCER, on_delivery=self._on_delivery
            )
        )
        self.failed = 0  # permanent delivery failures since the last flush

    def produce(self, topic: str, value: bytes, key: bytes, **kwargs: Any) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)  # the client queue is full: let it deliver
        self._producer.poll(0)

    def flush(self, timeout: float) -> int:
        """Messages not stored: still queued, or failed for good since the last flush."""
        remaining = self._producer.flush(timeout)
        failed, self.failed = self.failed, 0
        return remaining + failed

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed += 1
            log.error("delivery_failed", topic=msg.topic(), error=err.str(), code=err.name())
