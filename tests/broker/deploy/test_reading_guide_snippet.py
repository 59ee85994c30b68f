"""docs/reading.md's snippet runs as written on a real broker and prints every turn of the
topic, each with the refusal verdict the project's own decode reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.streams import publish_simulated
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

GUIDE = PROJECT_ROOT / "docs" / "reading.md"


def guide_snippet() -> str:
    match = re.search(
        # The block whose marker names this file (docs/development.md, "Command blocks").
        r"<!-- runs-in: tests/broker/deploy/test_reading_guide_snippet\.py::[^>]*-->\n"
        r"```python\n(.*?)```",
        GUIDE.read_text(),
        re.DOTALL,
    )
    assert match is not None, "docs/reading.md lost its snippet"
    return match.group(1)


def test_the_reading_guides_snippet_prints_every_turn_with_its_refusal(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    publish_simulated(kafka_settings, 150, tmp_path / "spool", seed=11)
    script = tmp_path / "snippet.py"
    script.write_text(guide_snippet())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNAUDIT_")}
    env["KAFKA_BOOTSTRAP_SERVERS"] = kafka_settings.bootstrap_servers or ""
    env["TURNAUDIT_TOPIC_PREFIX"] = kafka_settings.topics.prefix
    ran = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    printed = [line.split(" ") for line in ran.stdout.splitlines()]
    topic = kafka_settings.topics.turn_events
    decode = decoder_for(kafka_settings)
    ours = [
        decode(m.value()).event
        for m in read_range(kafka_settings, topic, None, end_offsets(kafka_settings, topic))
    ]
    assert ours
    assert sorted(printed) == sorted(
        [e["event_id"], str(e["verdicts"]["refusal_emitted"])] for e in ours
    )
