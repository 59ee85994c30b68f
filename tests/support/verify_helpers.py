"""Helpers for the verify and replay tests: publish through the real publisher,
copy ranges, and what a replay of a range must hold."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from turnaudit.events import occurred_moment
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import GroundTruth, TurnRuntimeSimulator
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames
from turnaudit.verify.verifier import Verifier

DECODE = TurnEventDeserializer(shipped_catalog())


@dataclass(frozen=True)
class Stored:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int


def fresh_topics(bootstrap: str) -> KafkaSettings:
    """The project's topics under a prefix of their own (3 partitions), created."""
    settings = KafkaSettings(
        bootstrap_servers=bootstrap, topics=TopicNames(f"t-{uuid.uuid4().hex[:10]}."), partitions=3
    )
    ensure_topics(settings)
    return settings


def fresh_prefix(settings: KafkaSettings) -> KafkaSettings:
    copy = replace(settings, topics=TopicNames(f"t-{uuid.uuid4().hex[:10]}."))
    ensure_topics(copy)
    return copy


def publish(
    settings: KafkaSettings,
    spool: Path,
    *,
    seed: int,
    events: int,
    versions: tuple[int, ...] = (3,),
    sessions: int = 20,
    start: datetime | None = None,
) -> GroundTruth:
    """Simulated turns whose clock starts at ``start`` (default: the simulator's, ahead of
    the wall clock, so each turn is stored at the time it is published)."""
    publisher = TurnEventPublisher(settings, spool_dir=spool)
    sim = TurnRuntimeSimulator(
        seed, schema_versions=versions, concurrent_sessions=sessions, start=start
    )
    for event in sim.events(events):
        publisher.publish(event)
    assert publisher.close().ok
    return sim.truth


def stored_range(settings: KafkaSettings) -> list[Stored]:
    topic = settings.topics.turn_events
    return [
        Stored(m.partition() or 0, m.offset() or 0, m.key(), m.value() or b"", m.timestamp()[1])
        for m in read_range(settings, topic, None, end_offsets(settings, topic))
    ]


def copy_to(settings: KafkaSettings, messages: list[Stored]) -> None:
    """Messages onto the turn-events topic of ``settings``, in list order, same partitions."""
    producer = Producer(settings.client_config())
    for m in messages:
        producer.produce(settings.topics.turn_events, m.value, m.key, partition=m.partition)
    assert producer.flush(30) == 0


def verify_in_memory(messages: list[Stored]) -> Verifier:
    """A copy of a range as the log would hold it: offsets renumbered per partition."""
    verifier = Verifier(DECODE)
    offsets: dict[int, int] = {}
    for m in messages:
        offset = offsets.get(m.partition, 0)
        offsets[m.partition] = offset + 1
        verifier.feed(m.partition, offset, m.key, m.value, m.timestamp)
    return verifier


def expected_lines(messages: list[Stored], surfaces: Redaction = DROPPED) -> list[dict[str, Any]]:
    """A direct read, decoded: what the replay must hold, partitions ascending, each by offset;
    surfaces and tool I/O as the replay's policy writes them (dropped by default)."""
    ordered = sorted(messages, key=lambda m: (m.partition, m.offset))
    found = []
    for m in ordered:
        decoded = DECODE(m.value)
        event = surfaces.event(decoded.event)
        found.append(
            {
                "partition": m.partition,
                "offset": m.offset,
                "writer_version": decoded.writer_version,
                "event": json.loads(
                    json.dumps(
                        {
                            **event,
                            "occurred_at": occurred_moment(event["occurred_at"]),
                        },
                        default=_hexed,
                    )
                ),
            }
        )
    return found


def _hexed(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
