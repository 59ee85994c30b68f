"""publish() and dead_letter() never write into the caller's event: they stamp
their own copy. A real librdkafka client pointed where nothing listens."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from turnaudit.errors import SerializationError
from turnaudit.local_broker import free_port
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames


@pytest.fixture
def publisher(tmp_path: Path) -> TurnEventPublisher:
    settings = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", topics=TopicNames("c."))
    return TurnEventPublisher(settings, spool_dir=tmp_path / "spool", probe_interval=60.0)


def test_publish_stamps_a_copy_and_leaves_the_callers_event_as_it_was(
    publisher: TurnEventPublisher,
) -> None:
    events = list(TurnRuntimeSimulator(5, schema_versions=(3,)).events(20))
    before = copy.deepcopy(events)
    ids = [publisher.publish(event) for event in events]
    assert events == before  # not one field written
    assert all(e["event_id"] == "" and e["sequence"] == -1 for e in events)
    assert len(set(ids)) == 20
    again = publisher.publish(events[0])  # the same built event twice: two turns
    assert again not in ids
    assert publisher.stats().published == 21
    publisher.close(timeout=0.2)


def test_dead_letter_leaves_the_callers_event_as_it_was(publisher: TurnEventPublisher) -> None:
    event = next(TurnRuntimeSimulator(6).events(1))
    before = copy.deepcopy(event)
    publisher.dead_letter(event, "contract:stub_fields", "a test")
    assert event == before
    stats = publisher.stats()
    assert stats.dead_lettered == 1
    assert stats.published == 0  # not an event of the stream
    publisher.close(timeout=0.2)


def test_an_event_that_does_not_fit_its_schema_uses_up_no_position(
    publisher: TurnEventPublisher,
) -> None:
    good, bad = list(TurnRuntimeSimulator(7, concurrent_sessions=1).events(2))
    bad["verdicts"] = {**bad["verdicts"], "schema_version": 99}
    with pytest.raises(SerializationError):
        publisher.publish(bad)
    publisher.publish(good)
    assert publisher.stats().published == 1
    assert publisher.stats().balanced
    publisher.close(timeout=0.2)
