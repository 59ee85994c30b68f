"""``turnaudit simulate --real-time`` stamps turns with the time they are published."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def occurred_millis(settings: KafkaSettings) -> list[int]:
    decode = TurnEventDeserializer(shipped_catalog())
    topic = settings.topics.turn_events
    stamps = []
    for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
        stamps.append(decode(msg.value()).event["occurred_at"])  # epoch ms, as on the wire
    return stamps


def simulate(settings: KafkaSettings, tmp_path: Path, *flags: str) -> None:
    assert settings.bootstrap_servers is not None
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnaudit.cli",
            "simulate",
            "--events",
            "40",
            "--rate",
            "200",
            "--spool-dir",
            str(tmp_path / "spool"),
            *flags,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_real_time_turns_carry_the_publishing_moment(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    before = int(time.time() * 1000)
    simulate(kafka_settings, tmp_path, "--real-time")
    after = int(time.time() * 1000)
    stamps = occurred_millis(kafka_settings)
    assert len(stamps) == 40
    assert all(before <= s <= after for s in stamps)


def test_without_it_the_seed_keeps_its_simulated_clock(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    before = int(time.time() * 1000)
    simulate(kafka_settings, tmp_path)
    after = int(time.time() * 1000)
    stamps = occurred_millis(kafka_settings)
    assert len(stamps) == 40
    assert not any(before <= s <= after for s in stamps)  # the simulated clock, not ours
