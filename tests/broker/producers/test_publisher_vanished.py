"""A runtime that vanishes: its publisher SIGKILLed and never restarted on its spool folder
(killed for good, or rescheduled onto an empty volume), after the broker refused its last
turns for good (they were handed on, announced in its open heads, and never stored). No
successor announces its heads cut; its liveness stops. Verify judges it vanished once silent
past the bound and counts, to the turn, the turns its open heads announced that the stream
lacks; a publisher that closed cleanly is never vanished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from tests.support import PROJECT_ROOT
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.stream_heads import VANISHED_AFTER_INTERVALS, VANISHED_SLACK_MS
from turnaudit.topic_names import TopicNames
from turnaudit.verify.run import run_verify

pytestmark = pytest.mark.broker

LIVENESS_S = 0.5


def limit_topic(settings: KafkaSettings, topic: str, max_bytes: int) -> None:
    admin = AdminClient(settings.client_config())
    entry = ConfigEntry(
        "max.message.bytes", str(max_bytes), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def vanishing_publisher(settings: KafkaSettings, spool: Path, seed: int) -> tuple[int, int]:
    """A publisher process hands on 40 turns (stored), then 30 the broker refuses for good,
    waits past one liveness interval (its open heads announced) and is SIGKILLed:
    (turns handed on, turns the broker stored)."""
    env = {
        **os.environ,
        "TURNAUDIT_LIVENESS_INTERVAL_S": str(LIVENESS_S),
        "TURNAUDIT_MAX_UNACKED_S": "60",
    }
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.crash_part",
            settings.bootstrap_servers or "",
            settings.topics.prefix,
            str(spool),
            str(seed),
        ],
        cwd=PROJECT_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        child.stdin.write("publish 40 wait\n")
        child.stdin.flush()
        first = status_line(child.stdout)
        limit_topic(settings, settings.topics.turn_events, 64)  # every turn refused now
        child.stdin.write("publish 30\n")
        child.stdin.flush()
        second = status_line(child.stdout)
        time.sleep(LIVENESS_S * 3)  # a liveness announcement after the last turn
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    limit_topic(settings, settings.topics.turn_events, 1_048_588)
    assert int(first[3]) == 40, first
    return int(second[1]), int(first[3])


def status_line(out: IO[str]) -> list[str]:
    """The child's next ``published P delivered D ...`` line (its log lines go by)."""
    for line in out:
        if line.startswith("published "):
            return line.split()
    raise AssertionError("the publisher process ended without a status line")


def fresh(bootstrap: str) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=bootstrap, topics=TopicNames(f"v-{uuid.uuid4().hex[:8]}."), partitions=3
    )
    ensure_topics(settings)
    return settings


def verify_after_the_bound(settings: KafkaSettings) -> dict[str, object]:
    time.sleep(VANISHED_AFTER_INTERVALS * LIVENESS_S + VANISHED_SLACK_MS / 1000 + 1)
    report = run_verify(settings, TurnEventDeserializer(shipped_catalog()), RangeSpec(), timeout=60)
    ends = report.as_json()["stream_ends"]
    assert report.verifier.counts.turns == 40
    return dict(ends)


def test_a_publisher_killed_and_never_restarted_is_vanished_with_its_turns_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = fresh(kafka_bootstrap)
    handed_on, stored = vanishing_publisher(settings, tmp_path / "spool", 21)
    assert handed_on == 70
    ends = verify_after_the_bound(settings)
    (gone,) = ends["vanished"]  # type: ignore[misc] - a list of one, or the test fails here
    assert gone["lost"] == handed_on - stored
    assert ends["lost_vanished"] == handed_on - stored
    assert ends["cut"] == 0
    assert ends["open"] == 0


def test_a_runtime_restarted_on_an_empty_volume_leaves_its_predecessor_vanished(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The successor runs on a new spool folder: it cannot announce its predecessor's heads,
    and closes cleanly itself; verify finds the predecessor vanished, the successor closed."""
    settings = fresh(kafka_bootstrap)
    handed_on, stored = vanishing_publisher(settings, tmp_path / "old-volume", 22)
    successor = TurnEventPublisher(
        settings, spool_dir=tmp_path / "new-volume", liveness_interval_s=LIVENESS_S
    )
    sim = TurnRuntimeSimulator(99, schema_versions=(3,), concurrent_sessions=4)
    for event in sim.events(25):
        successor.publish(event)
    assert successor.close(timeout=30).ok
    time.sleep(VANISHED_AFTER_INTERVALS * LIVENESS_S + VANISHED_SLACK_MS / 1000 + 1)
    report = run_verify(settings, TurnEventDeserializer(shipped_catalog()), RangeSpec(), timeout=60)
    ends = report.as_json()["stream_ends"]
    assert report.verifier.counts.turns == stored + 25
    assert [v["producer_id"] for v in ends["vanished"]] != [successor.producer_id]
    (gone,) = ends["vanished"]
    assert gone["lost"] == ends["lost_vanished"] == handed_on - stored
    assert ends["ended_cleanly"] >= 1  # the successor's streams, every turn stored
    assert not report.ok
    assert report.as_json()["unexplained_by_kind"]["lost_vanished"] >= 1
