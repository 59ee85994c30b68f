"""``verify --follow``'s checkpoint topic: ``<prefix>verify-state``, compacted, keyed by
partition and by stream; created on demand, read back whole.

(Meant for ``topics.topic_specs`` beside the project's other topics; kept here
until then, so ``verify --follow`` creates it itself.)
"""

from __future__ import annotations

from collections.abc import Iterator

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from turnaudit.errors import BrokerError
from turnaudit.kafka.admin import new_admin
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.reading import read_range
from turnaudit.settings import KafkaSettings

STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}


def verify_state_topic(settings: KafkaSettings) -> str:
    return settings.topics.verify_state


def ensure_verify_state_topic(settings: KafkaSettings, timeout: float = 30.0) -> str:
    """Create the compacted state topic (one partition) when it does not exist."""
    name = settings.topics.verify_state
    admin = new_admin(settings.client_config({"log_level": 0}))
    try:
        if name in admin.list_topics(timeout=timeout).topics:
            return name
        futures = admin.create_topics(
            [NewTopic(name, 1, -1, config=dict(STATE_TOPIC_CONFIG))], request_timeout=timeout
        )
        for future in futures.values():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
    except KafkaException as exc:
        raise BrokerError(f"cannot create {name}: {exc}") from exc
    return name


def read_state(
    settings: KafkaSettings, timeout: float = 60.0
) -> Iterator[tuple[bytes, bytes | None]]:
    """Every (key, value) of the state topic in log order (the latest per key wins)."""
    topic = settings.topics.verify_state
    marks = watermarks(settings, topic)
    for record in read_range(settings, topic, marks.low, marks.high, timeout=timeout):
        key = record.key()
        if key is not None:
            yield key, record.value()
