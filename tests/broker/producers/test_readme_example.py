"""The README's runtime integration example runs as written, against the real broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

README = PROJECT_ROOT / "README.md"


def runtime_example() -> str:
    match = re.search(
        # The block whose marker names this file (docs/development.md, "Command blocks").
        r"<!-- runs-in: tests/broker/producers/test_readme_example\.py::[^>]*-->\n"
        r"```python\n(.*?)```",
        README.read_text(),
        re.DOTALL,
    )
    assert match is not None, "the README lost its runtime example"
    return match.group(1)


def test_the_readme_runtime_example_runs_and_publishes(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(runtime_example())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNAUDIT_")}
    env["KAFKA_BOOTSTRAP_SERVERS"] = kafka_settings.bootstrap_servers or ""
    env["TURNAUDIT_TOPIC_PREFIX"] = kafka_settings.topics.prefix
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "audit_events_undelivered" not in result.stdout + result.stderr
    topic = kafka_settings.topics.turn_events
    decode = TurnEventDeserializer(shipped_catalog())
    events = [
        decode(m.value()).event
        for m in read_range(kafka_settings, topic, None, end_offsets(kafka_settings, topic))
    ]
    assert sorted((e["session_id"], e["path"]) for e in events) == [
        ("s-1", "MAIN"),
        ("s-2", "STUB"),
    ]
    assert not any((tmp_path / "var/spool/turnaudit").glob("segment-*.spool"))
