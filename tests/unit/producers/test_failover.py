"""The failover's routing decisions, alone and in a publisher whose librdkafka
client points where nothing listens (a real client, no broker)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from turnaudit.local_broker import free_port
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.route import Route
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.producers.spool import DiskSpool
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames


def nowhere() -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", topics=TopicNames("u."))


def test_a_publisher_starts_spooling_only_when_its_spool_holds_events() -> None:
    assert not Route(spooling=False, probe_interval=1.0).spooling
    assert Route(spooling=True, probe_interval=1.0).spooling


def test_a_refusing_client_sends_the_next_events_to_the_spool() -> None:
    route = Route(spooling=False, probe_interval=1.0)
    route.client_refused()
    assert route.spooling
    assert not route.broker_down  # a full queue is no outage: no probing
    assert not route.probe_due(100.0)
    assert route.may_drain(queued=0)
    assert not route.may_drain(queued=1)  # behind what librdkafka holds, never beside it


def test_an_outage_is_news_once_and_the_broker_is_probed_once_per_interval() -> None:
    route = Route(spooling=False, probe_interval=2.0)
    assert route.brokers_down()
    assert not route.brokers_down()  # still down: not news
    assert route.spooling
    assert route.broker_down
    assert route.probe_due(10.0)
    assert not route.probe_due(11.0)  # within the interval
    assert not route.probed(reachable=False)
    assert not route.may_drain(queued=0)  # down: nothing drains
    assert route.probe_due(12.0)
    assert route.probed(reachable=True)  # back
    assert not route.broker_down
    assert route.may_drain(queued=0)
    route.spool_empty()
    assert not route.spooling
    assert not route.may_drain(queued=0)  # nothing to drain


def test_not_spooling_means_no_probe_and_no_drain() -> None:
    route = Route(spooling=False, probe_interval=0.0)
    route.broker_down = True
    assert not route.probe_due(1.0)
    assert not route.may_drain(queued=0)


def test_after_close_every_event_goes_to_the_spool() -> None:
    route = Route(spooling=False, probe_interval=1.0)
    route.closed()
    assert route.spooling


def test_events_the_client_cannot_take_go_to_the_spool_and_come_back_in_order(
    tmp_path: Path,
) -> None:
    queue = 5
    publisher = TurnEventPublisher(
        nowhere(),
        spool_dir=tmp_path / "spool",
        probe_interval=60.0,
        producer_options={"queue.buffering.max.messages": queue},
    )
    events = list(TurnRuntimeSimulator(3, concurrent_sessions=3).events(12))
    for event in events:
        publisher.publish(event)
    stats = publisher.stats()
    # The client took at most five (fewer if it said first that every broker is
    # down); the rest went to the spool, never back to the client while it held any.
    assert stats.in_flight <= queue
    assert stats.in_flight + stats.spooled == stats.published == 12
    assert stats.spooled >= 12 - queue
    assert stats.balanced
    assert publisher.spooled_total == stats.spooled
    report = publisher.close(timeout=0.5)
    # What librdkafka still held went back in front of the spool, for the next one.
    assert (report.undelivered, report.lost, report.ok) == (12, 0, False)
    assert publisher.stats().balanced
    spool = DiskSpool(tmp_path / "spool")
    decode = TurnEventDeserializer(shipped_catalog())
    per_session: dict[str, list[int]] = defaultdict(list)
    for record in spool.read(limit=100):
        event = decode(record.message.value).event
        assert record.message.key == event["session_id"].encode()
        per_session[event["session_id"]].append(event["sequence"])
    spool.close()
    assert sum(map(len, per_session.values())) == 12
    for session, sequences in per_session.items():
        assert sequences == list(range(len(sequences))), session  # in order per session

    successor = TurnEventPublisher(nowhere(), spool_dir=tmp_path / "spool", probe_interval=60.0)
    assert successor.stats().inherited == 12
    assert successor.stats().balanced
    successor.close(timeout=0.2)


def test_an_unreachable_cluster_turns_the_route_to_the_spool(tmp_path: Path) -> None:
    publisher = TurnEventPublisher(
        nowhere(),
        spool_dir=tmp_path / "spool",
        probe_interval=60.0,
        producer_options={"reconnect.backoff.max.ms": 100},
        max_unacked_s=0,  # librdkafka's own outage path alone (the age bound has its tests)
    )
    source = TurnRuntimeSimulator(4).events(10_000)
    publisher.publish(next(source))  # the client tries to connect
    deadline = time.monotonic() + 20
    while not publisher._route.spooling and time.monotonic() < deadline:
        time.sleep(0.05)
    assert publisher._route.broker_down, "librdkafka never said every broker is down"
    for _ in range(20):
        publisher.publish(next(source))
    stats = publisher.stats()
    # Nothing more for the client while the broker is away: the 20 went to the spool
    # (the first may be there too, if librdkafka handed it back in the meantime).
    assert stats.spooled >= 20
    assert stats.spooled + stats.in_flight == 21
    assert stats.balanced
    report = publisher.close(timeout=0.2)
    assert report.undelivered == 21
