"""``verify --follow`` counts the turns lost in a crash and with a vanished producer, live,
on the real broker, as one-shot ``verify`` counts them over the same topic:

* a runtime SIGKILLed while its broker is hung (the JVM SIGSTOPped) with turns in
  librdkafka's memory, restarted on the same spool folder while the follower runs: the
  successor announces the cut heads and the follower's crash counter reaches one-shot
  verify's ``lost_in_crash`` (exact: the runtime waited five head intervals after its last
  turn) within 60 s; restarted, the follower counts none of it again;
* a runtime SIGKILLed after the broker refused its last turns for good and never restarted:
  silent past the bound, it is vanished on the follower's gauges with its open streams, its
  turns counted as one-shot verify counts them; a liveness record of it again clears it.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.broker.producers.test_publisher_crash import crash_while_hung
from tests.broker.producers.test_publisher_vanished import (
    fresh,
    vanishing_publisher,
    verify_after_the_bound,
)
from tests.broker.test_verify_follow import caught_up, follower, scrape
from tests.support.broker import broker_of_its_own
from tests.support.streams import wait_for
from tests.support.verify_helpers import publish
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.kafka.state_topic import read_state
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker, free_port
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.stream_heads import Liveness
from turnaudit.topic_names import TopicNames
from turnaudit.verify.run import run_verify

pytestmark = pytest.mark.broker

LOST = "turnaudit_verify_lost_turns_total"
# The gap grace far past the test: a gap loss would be another cause than the one measured.
GRACE = ("--grace", "600")


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    with broker_of_its_own(tmp_path_factory.mktemp("heads-kafka")) as broker:
        yield broker


def metrics(port: int) -> dict[str, float]:
    """The follower's page, or nothing while it is not serving yet."""
    try:
        return scrape(port)
    except OSError:
        return {}


def total(page: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in page.items() if k.startswith(prefix))


def lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").splitlines() if log.exists() else []


def heads_read(log: Path, after: int, partitions: int) -> bool:
    """The follower's log, past its first ``after`` lines, says a pass over stream-heads
    ended with every one of the turn topic's partitions judged."""
    return any(
        "verify_stream_heads_read" in line
        and f"partitions_judged={partitions}" in line.replace('"', "").replace(": ", "=")
        for line in lines(log)[after:]
    )


def test_a_crash_under_a_hung_broker_reaches_the_followers_counter_as_one_shot_verify(
    own_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    settings = KafkaSettings(
        bootstrap_servers=own_broker.bootstrap_servers,
        topics=TopicNames(f"fc-{uuid.uuid4().hex[:8]}."),
        partitions=3,
    )
    ensure_topics(settings)
    port, log = free_port(), tmp_path / "follow.log"
    spool = tmp_path / "spool"
    env = {**os.environ, "TURNAUDIT_MAX_UNACKED_S": "60"}
    with follower(settings, port, log, *GRACE) as proc:
        assert wait_for(lambda: LOST + "{cause=crash}" in metrics(port), timeout=60)
        first, second = crash_while_hung(own_broker, settings, spool, 41, env)
        published, delivered_before = int(second[1]), int(first[3])
        assert (published, delivered_before) == (100, 40)
        announced_at = time.monotonic()  # the successor announces the cut heads at start
        successor = TurnEventPublisher(settings, spool_dir=spool, probe_interval=0.2)
        successor.close(timeout=20)
        report = run_verify(
            settings, TurnEventDeserializer(shipped_catalog()), RangeSpec(), timeout=60
        )
        ends = report.as_json()["stream_ends"]
        one_shot = ends["lost_in_crash"]
        assert one_shot == published - report.verifier.counts.turns  # exact (see above)
        assert one_shot > 0
        reached = wait_for(lambda: metrics(port).get(LOST + "{cause=crash}") == one_shot, 60)
        seconds = time.monotonic() - announced_at
        page = metrics(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    print(
        f"\ncrash: {published} turns handed on, {report.verifier.counts.turns} on the topic; "
        f"one-shot verify lost_in_crash {one_shot}, the follower's counter "
        f"{page.get(LOST + '{cause=crash}')} within {seconds:.1f} s of the announcement; "
        f"{ends['cut']} streams cut"
    )
    assert reached, page  # within 60 s of the announcement
    assert page["turnaudit_verify_cut_streams_total{}"] == ends["cut"]
    assert total(page, "turnaudit_verify_lost_turns_by_pack_total{cause=crash,") == one_shot
    assert page[LOST + "{cause=gap}"] == page[LOST + "{cause=vanished}"] == 0
    # What was counted is in the state topic, under the judged streams' keys.
    judged = {k for k, v in read_state(settings) if k.startswith(b"heads:stream:") and v}
    assert len(judged) == ends["cut"]

    # Restarted, with turns on every partition again (each taken over, each judged): the
    # checkpoint says what was counted; the follower counts none of it again.
    publish(settings, tmp_path / "more", seed=42, events=60)
    before = len(lines(log))
    with follower(settings, port, log, *GRACE, log_level="INFO"):
        assert wait_for(lambda: caught_up(settings), timeout=90)
        assert wait_for(lambda: heads_read(log, before, 3), timeout=60)
        again = metrics(port)
    assert again[LOST + "{cause=crash}"] == 0
    assert again["turnaudit_verify_cut_streams_total{}"] == 0
    assert again["turnaudit_verify_stream_ends_waiting{}"] == 0


def test_a_vanished_runtime_is_on_the_followers_gauges_with_its_turns_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = fresh(kafka_bootstrap)
    port, log = free_port(), tmp_path / "follow.log"
    with follower(settings, port, log, *GRACE):
        assert wait_for(lambda: LOST + "{cause=vanished}" in metrics(port), timeout=60)
        handed_on, stored = vanishing_publisher(settings, tmp_path / "spool", 43)
        silent_from = time.monotonic()
        ends = verify_after_the_bound(settings)  # one-shot verify, past the bound
        (gone,) = ends["vanished"]  # type: ignore[misc]  # a list of one, or the test fails
        assert gone["lost"] == handed_on - stored > 0
        reached = wait_for(
            lambda: metrics(port).get(LOST + "{cause=vanished}") == gone["lost"], timeout=60
        )
        seconds = time.monotonic() - silent_from
        page = metrics(port)
        print(
            f"\nvanished: {handed_on} turns handed on, {stored} stored; one-shot lost_vanished "
            f"{gone['lost']} over {gone['open_streams']} open streams, the follower's counter "
            f"{page.get(LOST + '{cause=vanished}')} {seconds:.1f} s after the runtime was killed"
        )
        assert reached, page
        assert page["turnaudit_verify_vanishings_total{}"] == 1
        # The gauges are set once a second.
        at_risk = ("turnaudit_verify_vanished_producers{}", "turnaudit_verify_streams_at_risk{}")
        expected = (1, gone["open_streams"])
        assert wait_for(lambda: tuple(metrics(port).get(k) for k in at_risk) == expected, 10)
        assert (
            total(page, "turnaudit_verify_lost_turns_by_pack_total{cause=vanished,")
            == (gone["lost"])
        )
        # It announces again (a liveness record of it, as a runtime cut off from the
        # cluster and back would write): vanished no more.
        back = Liveness(gone["producer_id"], int(time.time() * 1000), 60_000, closed=False)
        producer = Producer(settings.client_config())
        producer.produce(settings.topics.stream_heads, back.encode(), back.key())
        assert producer.flush(30) == 0
        assert wait_for(
            lambda: metrics(port).get("turnaudit_verify_vanished_producers{}") == 0, timeout=30
        )
        after = metrics(port)
    assert after["turnaudit_verify_streams_at_risk{}"] == 0
    assert after[LOST + "{cause=vanished}"] == gone["lost"]  # counted once, kept


def latest_streams(settings: KafkaSettings) -> dict[bytes, bytes | None]:
    """The follower's stream records in its state topic, the latest per key."""
    latest: dict[bytes, bytes | None] = {}
    for key, value in read_state(settings):
        if key.startswith(b"stream:"):
            latest[key] = value
    return latest


def test_streams_that_ended_whole_leave_the_follower_and_a_restart_counts_none_of_them(
    own_broker: LocalKafkaBroker, tmp_path: Path
) -> None:
    """Runtimes that close cleanly: every stream they announced ended whole leaves the
    follower's memory (the open-streams gauge back to 0) and its state topic (a tombstone
    each); a restarted follower reads every announcement again and counts none of them
    lost, and streams of later runs leave it the same way."""
    settings = KafkaSettings(
        bootstrap_servers=own_broker.bootstrap_servers,
        topics=TopicNames(f"fr-{uuid.uuid4().hex[:8]}."),
        partitions=3,
    )
    ensure_topics(settings)
    port, log = free_port(), tmp_path / "follow.log"
    truth = publish(settings, tmp_path / "first", seed=7, events=300, sessions=12)
    streams = len(truth.chained_sessions)
    assert streams > 0
    open_streams = "turnaudit_verify_streams{state=open}"
    with follower(settings, port, log, *GRACE, log_level="INFO"):
        assert wait_for(lambda: caught_up(settings), timeout=90)
        assert wait_for(lambda: metrics(port).get(open_streams) == 0, timeout=60), {
            k: v for k, v in metrics(port).items() if "stream" in k or "lost" in k
        }
        first = metrics(port)
    records = latest_streams(settings)
    assert len(records) == streams
    assert [k for k, v in records.items() if v is not None] == []  # every one a tombstone

    more = publish(settings, tmp_path / "second", seed=8, events=120, sessions=6)
    before = len(lines(log))
    with follower(settings, port, log, *GRACE, log_level="INFO"):
        assert wait_for(lambda: caught_up(settings), timeout=90)
        assert wait_for(lambda: heads_read(log, before, 3), timeout=60)
        assert wait_for(lambda: metrics(port).get(open_streams) == 0, timeout=60), metrics(port)
        again = metrics(port)
    print(
        f"\nretired: {streams} streams ended whole, then {len(more.chained_sessions)} more; "
        f"open streams {first[open_streams]:g} and {again[open_streams]:g}"
    )
    for page in (first, again):
        assert total(page, LOST) == 0
        assert page["turnaudit_verify_cut_streams_total{}"] == 0
        assert page["turnaudit_verify_stream_ends_waiting{}"] == 0
    assert len(latest_streams(settings)) == streams + len(more.chained_sessions)
    assert [k for k, v in latest_streams(settings).items() if v is not None] == []
