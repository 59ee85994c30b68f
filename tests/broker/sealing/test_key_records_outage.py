"""A data key is never lost to an outage, on a real broker of this module's own.

Hung (its JVM SIGSTOPped): sealed turns are published across the outage (sessions begin
before and during it, so data keys are made while the broker answers nothing); the age
bound moves what librdkafka holds to the spool, key records with the turns; once the
broker is back every sealed turn on the topic opens with the keyring.

Down (stopped), with the publisher SIGKILLed in the outage: every turn its successor
drains from the spool opens (journal mode: every turn arrives, and opens). With the key
records on a producer of their own, outside the spool, the turns of sessions begun in
the outage arrive sealed under keys that never reached the topic.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from prometheus_client import CollectorRegistry

from tests.support import PROJECT_ROOT
from tests.support.broker import broker_of_its_own
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.reading import Opened, load_directory, read_turn_events
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

TURNS = 40


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    """A broker of this module's own: the tests hang it."""
    with broker_of_its_own(tmp_path_factory.mktemp("keys-kafka")) as broker:
        yield broker


@pytest.fixture
def settings(own_broker: LocalKafkaBroker) -> KafkaSettings:
    made = KafkaSettings(
        bootstrap_servers=own_broker.bootstrap_servers,
        topics=TopicNames(f"k-{uuid.uuid4().hex[:8]}."),
        partitions=3,
    )
    ensure_topics(made)
    return made


@pytest.fixture
def kek_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "surface-keys.toml"
    key = base64.b64encode(os.urandom(32)).decode()
    path.write_text(f'active = "kek-1"\n[keys]\nkek-1 = "{key}"\n')
    path.chmod(0o600)
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(path))
    return path


def on_topic(settings: KafkaSettings, kek_file: Path) -> tuple[set[str], set[str]]:
    """The event ids on the topic, and those of the copies that do not open with the
    keyring (a reader that read the key topic once, after the outage)."""
    keys = load_directory(settings, FileKeyring.load(kek_file))
    ids: set[str] = set()
    unopened: set[str] = set()
    for turn in read_turn_events(settings, keys=keys):
        assert turn.event is not None, turn.error
        ids.add(turn.event["event_id"])
        if not isinstance(turn.sealing, Opened):
            unopened.add(turn.event["event_id"])
    return ids, unopened


def status_line(lines: IO[str]) -> list[str]:
    """The child's next status line (its log lines share stdout)."""
    for line in lines:
        if line.startswith("published "):
            return line.split()
    raise AssertionError("the publisher process ended without a status line")


def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("before_outage", [0, 12])
def test_sealed_turns_published_through_a_hung_broker_all_open_once_it_is_back(
    settings: KafkaSettings,
    own_broker: LocalKafkaBroker,
    kek_file: Path,
    tmp_path: Path,
    before_outage: int,
) -> None:
    registry = CollectorRegistry()
    publisher = TurnEventPublisher(
        settings,
        spool_dir=tmp_path / "spool",
        registry=registry,
        probe_interval=0.2,
        max_unacked_s=1.0,
    )
    events = TurnRuntimeSimulator(before_outage, schema_versions=(5,), concurrent_sessions=3)
    source = events.events(TURNS)
    published = [publisher.publish(next(source)) for _ in range(before_outage)]
    wait_until(lambda: publisher.stats().delivered == before_outage, timeout=10)
    jvm = own_broker.status().pid
    assert jvm is not None
    os.kill(jvm, signal.SIGSTOP)  # hung: librdkafka holds key records and turns
    try:
        published += [publisher.publish(event) for event in source]
        wait_until(lambda: publisher._ledger.aged_out > 0, timeout=10)
        assert publisher._ledger.aged_out > 0  # moved to the spool, key records with them
    finally:
        os.kill(jvm, signal.SIGCONT)
    report = publisher.close(timeout=30)
    assert report.ok, report
    ids, unopened = on_topic(settings, kek_file)
    assert ids == set(published)
    assert unopened == set()  # every copy opens (an age-bound duplicate too)
    assert registry.get_sample_value("turnaudit_surface_data_keys_lost_total") == 0
    assert (registry.get_sample_value("turnaudit_surface_data_keys_total") or 0) > 1


@pytest.mark.parametrize("journal", [False, True])
def test_a_sealed_publisher_killed_while_the_broker_is_down_leaves_every_turn_it_spooled_openable(
    settings: KafkaSettings,
    own_broker: LocalKafkaBroker,
    kek_file: Path,
    tmp_path: Path,
    journal: bool,
) -> None:
    spool = tmp_path / "spool"
    env = {
        **os.environ,
        "TURNAUDIT_MAX_UNACKED_S": "0.5",  # most of the outage's turns reach the spool
        "TURNAUDIT_PUBLISH_JOURNAL": "1" if journal else "0",
    }
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.broker.sealing.sealed_crash_part",
            settings.bootstrap_servers,
            settings.topics.prefix,
            str(spool),
            "5",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        child.stdin.write("publish 10 wait\n")
        child.stdin.flush()
        assert status_line(child.stdout)[:4] == ["published", "10", "delivered", "10"]
        # Down, not hung: nothing the child writes can sit in a socket for the broker to
        # read later; what it did not put on disk dies with it.
        own_broker.stop()
        child.stdin.write("publish 30\n")  # new sessions among them: keys made while down
        child.stdin.flush()
        status = status_line(child.stdout)
    finally:
        child.kill()  # SIGKILL: nothing closed, nothing flushed
        child.wait()
        own_broker.start()
    assert status[:2] == ["published", "40"]
    assert int(status[5]) > 0  # the spool held sealed turns when it died
    successor = TurnEventPublisher(settings, spool_dir=spool, probe_interval=0.2)
    assert successor.close(timeout=30).ok
    ids, unopened = on_topic(settings, kek_file)
    assert len(ids) > 10  # the outage's spooled turns arrived
    assert unopened == set()  # and every one opens
    if journal:
        assert len(ids) == 40  # nothing lost at all
