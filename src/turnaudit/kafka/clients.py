"""Client configurations shared by the services that write to Kafka, and the
one producer wrapper: it owns retrying when librdkafka's queue is full."""

from __future__ import annotations

from collections.abc import Callable
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
# log_level 0: librdkafka's own log lines (one per failed connection attempt,
# many a second while a broker is away) stay off stderr; errors still reach
# error_cb, which the services rate-limit.
PRODUCER_DEFAULTS: dict[str, Any] = {"linger.ms": 5, "log_level": 0}

DeliveryCallback = Callable[[KafkaError | None, Message], None]
ErrorCallback = Callable[[KafkaError], None]


class ReliableProducer:
    """A producer whose ``flush`` result can be trusted: it says how many
    messages are still queued *or* failed, so "0" means every one was stored.

    ``produce`` never raises ``BufferError``: while the client queue is full it
    serves delivery reports until there is room. Any other refusal (a message
    larger than ``message.max.bytes``) is raised to the caller, who knows what
    the message is.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        error_cb: ErrorCallback | None = None,
        **overrides: Any,
    ) -> None:
        self._producer = Producer(
            kafka.client_config(
                PRODUCER_DEFAULTS,
                **RELIABLE_PRODUCER,
                on_delivery=self._on_delivery,
                **({"error_cb": error_cb} if error_cb is not None else {}),
                **overrides,
            )
        )
        self.failed = 0  # permanent delivery failures since the last flush

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        *,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        on_delivery: DeliveryCallback | None = None,
        from_callback: bool = False,
    ) -> None:
        """Queue one message; ``on_delivery`` replaces the counting report for it.

        ``from_callback``: called from a delivery report, where serving reports
        again (``poll``) is not allowed; a full queue then raises ``BufferError``.
        """
        kwargs: dict[str, Any] = {}
        if headers:
            kwargs["headers"] = headers
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        if from_callback:
            self._producer.produce(topic, value, key, **kwargs)
            return
        while True:
            try:
                self._producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)  # the client queue is full: let it deliver
        self._producer.poll(0)

    def poll(self, timeout: float = 0.0) -> int:
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        """Messages not stored: still queued, or failed for good since the last flush."""
        remaining = self._producer.flush(timeout)
        failed, self.failed = self.failed, 0
        return int(remaining) + failed

    def queued(self) -> int:
        return len(self._producer)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed += 1
            log.error("delivery_failed", topic=msg.topic(), error=err.str(), code=err.name())
