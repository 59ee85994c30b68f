"""Fault injection on the publisher: a really full filesystem, a really stopped
broker, both at once, and a schema registry that goes away.

The small filesystem is a tmpfs of a few hundred KB mounted by the test (the
suite runs as root) and unmounted at teardown: its writes really fail with
ENOSPC. After recovery every event that was not refused is on the topic exactly
once by event id, in per-session order, and ``stats()`` and the metrics add up.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.support.broker import broker_of_its_own
from tests.support.registry import local_registry_settings
from tests.support.smallfs import fill_disk, small_filesystem
from turnaudit.errors import ConfigurationError, EventRefusedError, RegistryUnavailableError
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker, free_port
from turnaudit.local_registry import LocalSchemaRegistry
from turnaudit.producers.accounting import CloseReport
from turnaudit.producers.publisher import PublisherStats, TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

SMALL_FS_KB = 320


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "small", SMALL_FS_KB) as mount_point:
        yield mount_point


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    """A broker of this module's own: the tests stop and restart it."""
    with broker_of_its_own(tmp_path_factory.mktemp("own-kafka")) as broker:
        yield broker


@pytest.fixture
def own_settings(own_broker: LocalKafkaBroker) -> KafkaSettings:
    if not own_broker.status().serving:
        own_broker.start()
    settings = KafkaSettings(
        bootstrap_servers=own_broker.bootstrap_servers,
        topics=TopicNames(f"f-{uuid.uuid4().hex[:8]}."),
        partitions=3,
    )
    ensure_topics(settings)
    return settings


class Runtime:
    """A turn runtime's side: publishes, keeps what was accepted and refused."""

    def __init__(self, publisher: TurnEventPublisher, seed: int) -> None:
        self.publisher = publisher
        self.source = TurnRuntimeSimulator(seed).events(100_000)
        self.accepted: list[str] = []
        self.refused: dict[str, tuple[str, int]] = {}  # event id -> (session, sequence)
        self.reasons: Counter[str] = Counter()

    def publish(self, n: int, pause: float = 0.0) -> None:
        for _ in range(n):
            event = next(self.source)
            try:
                self.accepted.append(self.publisher.publish(event))
            except EventRefusedError as exc:
                self.reasons[exc.reason] += 1
                self.refused[exc.event_id] = (event["session_id"], exc.sequence)
            if pause:
                time.sleep(pause)


def assert_balanced(stats: PublisherStats, registry: CollectorRegistry) -> None:
    assert stats.balanced, stats

    def metric(name: str, **labels: str) -> float:
        value = registry.get_sample_value(f"turnaudit_publisher_{name}", labels)
        assert value is not None, name
        return value

    assert metric("events_published_total") == stats.published
    assert metric("events_delivered_total") == stats.delivered
    assert metric("events_failed_total") == stats.failed
    refused = sum(metric("events_refused_total", reason=r) for r in ("spool_full", "disk_error"))
    assert refused == stats.refused
    assert metric("spool_events") == stats.spooled
    assert metric("events_in_flight") == stats.in_flight
    assert metric("delivery_latency_seconds_count") == stats.delivered


def assert_on_topic_exactly_once_in_order(settings: KafkaSettings, runtime: Runtime) -> None:
    decode = TurnEventDeserializer(shipped_catalog())
    seen: Counter[str] = Counter()
    sequences: dict[str, list[int]] = defaultdict(list)
    topic = settings.topics.turn_events
    for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
        event = decode(msg.value()).event
        seen[event["event_id"]] += 1
        sequences[event["session_id"]].append(event["sequence"])
    assert set(seen) == set(runtime.accepted)  # every accepted event, no refused one
    assert max(seen.values()) == 1  # exactly once by event id
    refused_by_session: dict[str, set[int]] = defaultdict(set)
    for session, sequence in runtime.refused.values():
        refused_by_session[session].add(sequence)
    for session, numbers in sequences.items():
        assert numbers == sorted(numbers), session  # in per-session order
        # The only gaps are the refused events' numbers.
        expected = sorted(set(range(max(numbers) + 1)) - refused_by_session[session])
        assert numbers == expected, session


def wait_until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def spool_segments(spool: Path) -> list[Path]:
    return sorted(spool.glob("segment-*.spool"))


def test_disk_full_then_freed_while_spooling(kafka_settings: KafkaSettings, small_fs: Path) -> None:
    """A client queue of 20 messages sends most events to a spool on a tiny disk."""
    registry = CollectorRegistry()
    spool = small_fs / "spool"
    publisher = TurnEventPublisher(
        kafka_settings,
        spool_dir=spool,
        registry=registry,
        producer_options={"queue.buffering.max.messages": 20, "linger.ms": 200},
    )
    runtime = Runtime(publisher, seed=31)
    filler = fill_disk(small_fs)
    runtime.publish(400)  # the queue overflows into a spool that has no room
    assert runtime.refused, "the full disk refused events"
    assert set(runtime.reasons) == {"disk_error"}
    assert publisher.refused_by_reason() == {"disk_error": len(runtime.refused)}
    assert_balanced(publisher.stats(), registry)
    filler.unlink()  # space is back
    refused_before = len(runtime.refused)
    runtime.publish(600)
    report = publisher.close(timeout=120)
    assert len(runtime.refused) == refused_before  # room again: nothing more refused
    assert report.undelivered == 0
    assert report.refused == refused_before
    assert report.delivered == len(runtime.accepted)
    assert_balanced(publisher.stats(), registry)
    assert_on_topic_exactly_once_in_order(kafka_settings, runtime)
    assert spool_segments(spool) == []  # drained spool files are removed


def test_broker_down_then_back(
    own_settings: KafkaSettings, own_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    publisher = TurnEventPublisher(
        own_settings,
        spool_dir=tmp_path / "spool",
        registry=registry,
        probe_interval=0.2,
        max_unacked_s=0,  # librdkafka's outage path alone, as in the test below
    )
    runtime = Runtime(publisher, seed=32)
    runtime.publish(1500)
    stopper = threading.Thread(target=own_broker.stop)
    stopper.start()  # the broker goes away while events keep coming
    runtime.publish(1500, pause=0.001)
    stopper.join()
    runtime.publish(1000)  # fully down: the spool takes them
    wait_until(lambda: publisher.stats().spooled > 0)
    stats = publisher.stats()
    assert stats.oldest_spooled_age_s >= 0
    assert stats.spool_bytes > 0
    assert_balanced(stats, registry)
    own_broker.start()
    runtime.publish(1000)
    report = publisher.close(timeout=120)
    assert report.ok, report
    assert not runtime.refused
    assert report.delivered == 5000
    assert_balanced(publisher.stats(), registry)
    assert_on_topic_exactly_once_in_order(own_settings, runtime)
    assert spool_segments(tmp_path / "spool") == []


def test_broker_down_and_disk_full_at_once(
    own_settings: KafkaSettings, own_broker: LocalKafkaBroker, small_fs: Path
) -> None:
    registry = CollectorRegistry()
    spool = small_fs / "spool"
    # librdkafka's own outage path: its idempotent retries keep every turn exactly
    # once. The age bound is off here; on a slow machine the broker stays away past
    # it, and the turns it moves may come back as same-id duplicates, which is its
    # own contract (test_turns_aged_out_of_a_hung_broker_onto_a_full_disk_stay_in_memory).
    publisher = TurnEventPublisher(
        own_settings,
        spool_dir=spool,
        registry=registry,
        probe_interval=0.2,
        max_unacked_s=0,
    )
    runtime = Runtime(publisher, seed=33)
    runtime.publish(300)
    own_broker.stop()
    wait_until(lambda: publisher.stats().in_flight == 0 or publisher._route.broker_down)
    runtime.publish(100)
    wait_until(lambda: publisher._route.spooling)
    filler = fill_disk(small_fs)
    runtime.publish(300)  # broker away and no room on disk: refused, counted, logged
    assert runtime.refused
    assert_balanced(publisher.stats(), registry)
    # Space comes back before the broker does (the case that broke the count).
    filler.unlink()
    refused_before = len(runtime.refused)
    runtime.publish(200)
    assert len(runtime.refused) == refused_before
    assert publisher.stats().spooled > 0
    assert_balanced(publisher.stats(), registry)
    own_broker.start()
    runtime.publish(200)
    report = publisher.close(timeout=120)
    assert report.undelivered == 0, report
    assert report.failed == 0
    assert report.lost == 0
    assert report.refused == refused_before
    assert report.delivered == len(runtime.accepted)
    stats = publisher.stats()
    assert stats.worker_errors == 0
    assert_balanced(stats, registry)
    assert_on_topic_exactly_once_in_order(own_settings, runtime)
    assert spool_segments(spool) == []


def test_a_registry_outage_after_start_costs_the_turn_nothing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    registry = LocalSchemaRegistry(local_registry_settings(tmp_path / "registry"))
    registry.start()
    try:
        settings = dataclasses.replace(kafka_settings, schema_registry_url=registry.url)
        metrics = CollectorRegistry()
        publisher = TurnEventPublisher(settings, spool_dir=tmp_path / "spool", registry=metrics)
        registry.stop()  # the real server, gone: from here on nobody answers at its port
        runtime = Runtime(publisher, seed=34)
        runtime.publish(500)
        report = publisher.close(timeout=60)
        assert report.ok  # the turn's path never asked it
        assert report.delivered == 500
        assert publisher.spooled_total == 0
        assert_balanced(publisher.stats(), metrics)
        registry.start()  # a reader resolves the ids the publisher registered at start
        decode = decoder_for(settings, schemas_topic=False)
        topic = settings.topics.turn_events
        ids = Counter(
            decode(m.value()).event["event_id"]
            for m in read_range(settings, topic, None, end_offsets(settings, topic))
        )
    finally:
        registry.stop()
    assert set(ids) == set(runtime.accepted)
    assert max(ids.values()) == 1


def test_a_registry_away_at_start_fails_before_the_first_turn(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"  # no registry listens there
    with pytest.raises(RegistryUnavailableError, match="did not register TurnEvent v1"):
        TurnEventPublisher(
            dataclasses.replace(kafka_settings, schema_registry_url=url),
            spool_dir=tmp_path / "spool",
        )
    assert not list((tmp_path / "spool").rglob("*.spool"))


def test_the_worker_survives_errors_and_publish_restarts_it(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    broken = {"left": 3}
    real_poll = publisher._schema_producer.poll

    def flaky_poll(timeout: float = 0) -> int:
        if broken["left"]:
            broken["left"] -= 1
            raise RuntimeError("injected")
        return int(real_poll(timeout))

    monkeypatch.setattr(publisher._failover, "_also_poll", flaky_poll)
    runtime = Runtime(publisher, seed=35)
    runtime.publish(200)
    wait_until(lambda: broken["left"] == 0)
    assert publisher._failover.worker is not None
    assert publisher._failover.worker.is_alive()
    assert publisher.stats().worker_errors == 3
    report = publisher.close(timeout=60)
    assert report.ok
    assert report.delivered == 200


def test_an_unusable_spool_directory_is_a_configuration_error(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigurationError, match=r"spool directory .* is not usable"):
        TurnEventPublisher(kafka_settings, spool_dir=blocker / "spool")
    assert os.path.isfile(blocker)


def test_events_published_after_close_wait_in_the_spool_for_the_next_publisher(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    first = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    runtime = Runtime(first, seed=36)
    runtime.publish(50)
    assert first.close(timeout=60).ok
    runtime.publish(30)  # a late turn: kept, not lost
    stats = first.stats()
    assert stats.spooled == 30
    assert stats.balanced
    successor = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    assert successor.stats().inherited == 30
    report = successor.close(timeout=60)
    assert report.ok
    assert report.delivered == 30
    assert_on_topic_exactly_once_in_order(kafka_settings, runtime)


def age_bound_publisher(
    settings: KafkaSettings, spool_dir: Path, registry: CollectorRegistry
) -> TurnEventPublisher:
    """A publisher that moves turns unacknowledged for a second to its spool."""
    return TurnEventPublisher(
        settings, spool_dir=spool_dir, registry=registry, probe_interval=0.2, max_unacked_s=1.0
    )


def delivered_then_broker_pid(runtime: Runtime, turns: int, broker: LocalKafkaBroker) -> int:
    """``turns`` published and delivered (the broker is known to answer); the broker's pid,
    for the test to hang it."""
    runtime.publish(turns)
    wait_until(lambda: runtime.publisher.stats().delivered == turns)
    jvm = broker.status().pid
    assert jvm is not None
    return jvm


def test_turns_aged_out_of_a_hung_broker_onto_a_full_disk_stay_in_memory(
    own_settings: KafkaSettings, own_broker: LocalKafkaBroker, small_fs: Path
) -> None:
    """The age bound moves turns a hung broker never acknowledged to the spool; when
    the disk is really full then, they go back to librdkafka's memory (in order)
    instead of being lost, and are delivered once the broker answers."""
    registry = CollectorRegistry()
    publisher = age_bound_publisher(own_settings, small_fs / "spool", registry)
    runtime = Runtime(publisher, seed=41)
    jvm = delivered_then_broker_pid(runtime, 50, own_broker)
    filler = fill_disk(small_fs)
    os.kill(jvm, signal.SIGSTOP)  # hung, not down: librdkafka keeps the turns
    try:
        runtime.publish(120)
        # Past the bound, twice: each time the disk refuses them, they go back to memory.
        time.sleep(3.5)
        stats = publisher.stats()
        assert stats.failed == 0, stats
        assert_balanced(stats, registry)
    finally:
        os.kill(jvm, signal.SIGCONT)
    filler.unlink()
    report = publisher.close(timeout=120)
    assert report.lost == 0, report
    assert report.failed == 0, report
    assert report.undelivered == 0, report
    assert len(runtime.accepted) == 170  # the spool was never needed for publish()
    assert publisher._ledger.aged_out > 0
    assert_on_topic_first_copies_in_order(own_settings, runtime, publisher._ledger.aged_out)


def assert_on_topic_first_copies_in_order(
    settings: KafkaSettings, runtime: Runtime, aged_out: int
) -> None:
    """Every turn on the topic, first copies in stream order; an in-flight original
    the hung broker still wrote is a same-id duplicate, which readers count once."""
    decode = TurnEventDeserializer(shipped_catalog())
    first: dict[str, list[int]] = defaultdict(list)
    copies: Counter[str] = Counter()
    topic = settings.topics.turn_events
    for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
        event = decode(msg.value()).event
        copies[event["event_id"]] += 1
        if copies[event["event_id"]] == 1:
            first[event["session_id"]].append(event["sequence"])
    assert set(copies) == set(runtime.accepted)
    # Only a move by the bound makes a copy: each one at most one more of a turn.
    assert sum(n - 1 for n in copies.values()) <= aged_out
    for session, numbers in first.items():
        assert numbers == list(range(len(numbers))), session


def test_turns_the_age_bound_moves_to_the_spool_during_close_are_delivered_by_it(
    own_settings: KafkaSettings, own_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    """close() begins with the turns still in librdkafka (nothing spooled yet) and a hung
    broker: the age bound moves them to the spool while close() waits, and close() drains
    that spool once the broker answers, rather than stopping its worker with turns on disk."""
    publisher = age_bound_publisher(own_settings, tmp_path / "spool", CollectorRegistry())
    runtime = Runtime(publisher, seed=43)
    jvm = delivered_then_broker_pid(runtime, 20, own_broker)
    os.kill(jvm, signal.SIGSTOP)  # hung: librdkafka holds the turns, none reported
    reports: list[CloseReport] = []
    try:
        runtime.publish(80)
        assert len(publisher._failover.spool) == 0  # all in librdkafka when close() begins
        closing = threading.Thread(target=lambda: reports.append(publisher.close(timeout=120)))
        closing.start()
        wait_until(lambda: publisher._ledger.aged_out > 0, timeout=30)  # moved while closing
        assert closing.is_alive()
    finally:
        os.kill(jvm, signal.SIGCONT)
    closing.join(timeout=150)
    assert not closing.is_alive()
    (report,) = reports
    assert report.undelivered == 0, report
    assert report.lost == 0, report
    assert report.failed == 0, report
    assert_on_topic_first_copies_in_order(own_settings, runtime, publisher._ledger.aged_out)
