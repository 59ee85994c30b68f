"""The publisher's producer configuration and its settings read from the environment."""

from __future__ import annotations

import os

from turnaudit.errors import ConfigurationError
from turnaudit.kafka.producer import DEFAULTS, RELIABLE

# Producer options the delivery guarantees rest on; a user may not override them.
GUARANTEES: dict[str, object] = {
    **RELIABLE,  # idempotent, acks=all, message.timeout.ms=0: retried until delivered
    # Every delivery is reported: deliveries are counted from the reports, on
    # the publisher's own thread, never from the client's queue length.
    "delivery.report.only.error": False,
}
PRODUCER_DEFAULTS: dict[str, object] = {
    **DEFAULTS,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 262_144,
    "reconnect.backoff.max.ms": 1000,
}


DEFAULT_MAX_UNACKED_S = 5.0


def env_seconds(name: str, default: float) -> float:
    """A non-negative number of seconds from the environment, or ``default``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigurationError(f"{name}={raw!r}: expected a number of seconds >= 0")
    return value
