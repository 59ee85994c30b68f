"""A publisher SIGKILLed while its broker is hung (SIGSTOPped JVM) with turns in
librdkafka's memory: a successor on the same spool directory announces the
streams as cut, and verify counts the turns lost in the crash, to the turn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.broker import broker_of_its_own
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames
from turnaudit.verify.run import run_verify

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    with broker_of_its_own(tmp_path_factory.mktemp("crash-kafka")) as broker:
        yield broker


def test_a_crash_under_a_hung_broker_is_counted_to_the_turn(
    own_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    settings = KafkaSettings(
        bootstrap_servers=own_broker.bootstrap_servers,
        topics=TopicNames(f"c-{uuid.uuid4().hex[:8]}."),
        partitions=3,
    )
    ensure_topics(settings)
    spool = tmp_path / "spool"
    env = {**os.environ, "TURNAUDIT_MAX_UNACKED_S": "60"}  # keep them in memory: the crash case
    first, second = crash_while_hung(own_broker, settings, spool, 11, env)
    published, spooled = int(second[1]), int(second[5])
    assert published == 100
    assert int(first[3]) == 40  # delivered before the broker hung
    assert spooled == 0
    successor = TurnEventPublisher(settings, spool_dir=spool, probe_interval=0.2)
    successor.close(timeout=20)
    report = run_verify(settings, TurnEventDeserializer(shipped_catalog()), RangeSpec(), timeout=60)
    ends = report.as_json()["stream_ends"]
    on_topic = report.verifier.counts.turns
    # Exact: the child waited a second (five head intervals) after its last turn.
    assert ends["lost_in_crash"] == published - on_topic
    # Never more than the child saw unacknowledged (the broker may have taken some
    # whose acknowledgement the hang held back).
    assert 0 < ends["lost_in_crash"] <= published - int(second[3])
    assert ends["cut"] >= 1
    assert ends["ended_cleanly"] == 0
    assert not report.ok
    assert report.as_json()["unexplained_by_kind"]["lost_in_crash"] == sum(
        1 for s in ends["cut_streams"] if s["lost_in_crash"]
    )


def test_in_journal_mode_a_crash_under_a_hung_broker_loses_nothing(
    own_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    """As above with TURNAUDIT_PUBLISH_JOURNAL=1: the 60 turns in librdkafka's memory
    were fsynced to the journal first; the successor re-sends them from it and only
    them (the 40 acknowledged before the hang are acknowledged in the journal too),
    and verify counts every turn once."""
    settings = KafkaSettings(
        bootstrap_servers=own_broker.bootstrap_servers,
        topics=TopicNames(f"j-{uuid.uuid4().hex[:8]}."),
        partitions=3,
    )
    ensure_topics(settings)
    spool = tmp_path / "spool"
    env = {**os.environ, "TURNAUDIT_MAX_UNACKED_S": "60", "TURNAUDIT_PUBLISH_JOURNAL": "1"}
    first, second = crash_while_hung(own_broker, settings, spool, 12, env)
    published, delivered, spooled = int(second[1]), int(second[3]), int(second[5])
    assert published == 100
    assert int(first[3]) == 40
    assert spooled == 0
    assert delivered < published  # turns were in memory only, but for the journal
    assert list((spool / "journal").iterdir())  # the crash left the journal
    successor = TurnEventPublisher(settings, spool_dir=spool, probe_interval=0.2)
    assert successor.stats().inherited == published - delivered
    report_closed = successor.close(timeout=60)
    assert report_closed.ok, report_closed
    assert not list((spool / "journal").iterdir())  # recovered into the spool, then sent
    report = run_verify(settings, TurnEventDeserializer(shipped_catalog()), RangeSpec(), timeout=60)
    ends = report.as_json()["stream_ends"]
    assert ends["lost_in_crash"] == 0
    assert report.verifier.counts.turns == published  # each turn once
    # Copies only of turns never acknowledged (the hung broker may read a request the
    # killed client had put on the wire): never one of the 40 acknowledged before.
    assert report.as_json()["duplicates"]["count"] <= published - delivered
    assert report.as_json()["unexplained_by_kind"].get("lost_in_crash", 0) == 0


def crash_while_hung(
    own_broker: LocalKafkaBroker,
    settings: KafkaSettings,
    spool: Path,
    seed: int,
    env: dict[str, str],
) -> tuple[list[str], list[str]]:
    """A publisher process hands on 40 turns (delivered), the broker's JVM is
    SIGSTOPped, it hands on 60 more and is SIGKILLed: its two status lines."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.crash_part",
            settings.bootstrap_servers,
            settings.topics.prefix,
            str(spool),
            str(seed),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    jvm = own_broker.status().pid
    assert jvm is not None
    try:
        child.stdin.write("publish 40 wait\n")
        child.stdin.flush()
        first = child.stdout.readline().split()
        os.kill(jvm, signal.SIGSTOP)  # hung, not down
        child.stdin.write("publish 60\n")
        child.stdin.flush()
        second = child.stdout.readline().split()
        child.kill()  # SIGKILL with 60 turns in librdkafka's memory
        child.wait()
    finally:
        os.kill(jvm, signal.SIGCONT)
    return first, second
