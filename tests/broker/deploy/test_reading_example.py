"""docs/examples/read_turns.py, the public reading API's example, runs as written on a real
broker and reads every turn the simulator published, as the project's own decode does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.cli import run_turnaudit
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

EXAMPLE = PROJECT_ROOT / "docs/examples/read_turns.py"


def test_the_reading_example_prints_every_turn(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNAUDIT_")}
    env["KAFKA_BOOTSTRAP_SERVERS"] = kafka_settings.bootstrap_servers or ""
    env["TURNAUDIT_TOPIC_PREFIX"] = kafka_settings.topics.prefix
    published = run_turnaudit(
        "simulate",
        "--events",
        "150",
        "--seed",
        "5",
        "--spool-dir",
        str(tmp_path / "spool"),
        env=env,
        timeout=120,
    )
    assert published.returncode == 0, published.stderr
    ran = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    *turns, summary = [json.loads(line) for line in ran.stdout.splitlines()]
    assert summary["summary"]["turns"] == len(turns)
    assert "undecodable" not in summary["summary"]
    # The same turns the project's own reader decodes from the topic, in the same order.
    topic = kafka_settings.topics.turn_events
    decode = decoder_for(kafka_settings)
    ours = [
        decode(m.value()).event
        for m in read_range(kafka_settings, topic, None, end_offsets(kafka_settings, topic))
    ]
    emitted = int(published.stdout.split("published ", 1)[1].split()[0])
    assert len(ours) == emitted > 0  # the simulator's breaching turns went to the DLQ instead
    assert sorted(t["event_id"] for t in turns) == sorted(e["event_id"] for e in ours)
    by_id = {e["event_id"]: e for e in ours}
    for turn in turns:
        event = by_id[turn["event_id"]]
        assert turn["refused"] == event["verdicts"]["refusal_emitted"]
        assert turn["stream"] == [event["producer_id"], event["sequence"]]
    assert summary["summary"].get("refused", 0) == sum(
        e["verdicts"]["refusal_emitted"] for e in ours
    )
