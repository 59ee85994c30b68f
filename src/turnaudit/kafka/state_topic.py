"""``verify --follow``'s checkpoint topic: ``<prefix>verify-state``, compacted, keyed by
partition and by stream.

It has as many partitions as the turn topic, and a record about turn partition P (its
proof, its streams, with a keyring its streams' trust) is written to state partition
``P mod n``: a member taking partition P over reads that one state partition, not the
whole topic. A state topic made before (one partition) still works: everything is
in partition 0. Created on demand.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from turnaudit.errors import BrokerError
from turnaudit.kafka.admin import new_admin
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import wait_for_leaders
from turnaudit.settings import KafkaSettings

STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}


def verify_state_topic(settings: KafkaSettings) -> str:
    return settings.topics.verify_state


def ensure_verify_state_topic(settings: KafkaSettings, timeout: float = 30.0) -> str:
    """Create the compacted state topic, as many partitions as the turn topic, when it
    does not exist."""
    name = settings.topics.verify_state
    admin = new_admin(settings.client_config({"log_level": 0}))
    try:
        topics = admin.list_topics(timeout=timeout).topics
        if name in topics:
            return name
        turn_events = topics.get(settings.topics.turn_events)
        partitions = max(1, len(turn_events.partitions) if turn_events is not None else 1)
        futures = admin.create_topics(
            [NewTopic(name, partitions, -1, config=dict(STATE_TOPIC_CONFIG))],
            request_timeout=timeout,
        )
        for future in futures.values():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        # Created is not yet known everywhere: a worker that reads it at once could be told
        # it does not exist.
        wait_for_leaders(admin, [name], timeout)
    except KafkaException as exc:
        raise BrokerError(f"cannot create {name}: {exc}") from exc
    return name


def state_partitions(settings: KafkaSettings) -> int:
    """How many partitions the state topic has."""
    return max(1, len(watermarks(settings, settings.topics.verify_state).high))


def read_state(
    settings: KafkaSettings,
    about: Iterable[int] | None = None,
    *,
    timeout: float = 60.0,
) -> Iterator[tuple[bytes, bytes | None]]:
    """The (key, value) records of the state partitions that hold what is about the turn
    partitions ``about`` (None: every state partition), in log order (the latest per key
    wins); records about other turn partitions may come along (the caller filters)."""
    topic = settings.topics.verify_state
    marks = watermarks(settings, topic)
    count = max(1, len(marks.high))
    wanted = None if about is None else {p % count for p in about}
    start = {p: o for p, o in marks.low.items() if wanted is None or p in wanted}
    end = {p: o for p, o in marks.high.items() if wanted is None or p in wanted}
    for record in read_range(settings, topic, start, end, timeout=timeout):
        key = record.key()
        if key is not None:
            yield key, record.value()
