"""docs/subscribers.md: its facts are the software's, and its Python recipe reads a real broker."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.realparts import binary, tools_path
from tests.support.streams import publish_simulated
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

GUIDE = (PROJECT_ROOT / "docs" / "subscribers.md").read_text()


def python_recipe() -> str:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE, re.DOTALL)
    assert len(blocks) == 1
    return blocks[0]


def test_the_python_recipe_reads_every_version_without_the_project(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    code = python_recipe()
    assert "turnaudit" not in re.sub(r'"""[^"]*"""', "", code)  # no import of this project
    publish_simulated(kafka_settings, 300, tmp_path / "spool", seed=41)
    script = tmp_path / "recipe.py"
    script.write_text(code)
    assert kafka_settings.bootstrap_servers is not None
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "TURNAUDIT_TOPIC_PREFIX": kafka_settings.topics.prefix,
        "LIMIT": "300",
    }
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = {line["event_id"]: line for line in map(json.loads, result.stdout.splitlines())}

    topic = kafka_settings.topics.turn_events
    decode = TurnEventDeserializer(shipped_catalog())
    ours = {}
    for msg in read_range(kafka_settings, topic, None, end_offsets(kafka_settings, topic)):
        ours[decode(msg.value()).event["event_id"]] = msg.value()
    assert set(printed) == set(ours)
    for event_id, value in ours.items():
        event = decode(value).event
        line = printed[event_id]
        assert (line["session_id"], line["sequence"], line["pack_id"], line["refused"]) == (
            event["session_id"],
            event["sequence"],
            event["pack_id"],
            event["verdicts"]["refusal_emitted"],
        )
        assert line["writer"] == value[2:10].hex()
    versions = {s.fingerprint_hex for s in shipped_catalog().versions}
    assert {line["writer"] for line in printed.values()} == versions


def kcat_recipe() -> str:
    section = GUIDE.split("## Recipe: kcat and avro-tools", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1
    return blocks[0]


def test_the_kcat_and_avro_tools_recipe_decodes_a_turn_event_as_written(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    # kcat is Debian's, fetched into deploy/tools/ (`make kcat`); python3 and java from PATH.
    binary("kcat", "kcat")
    for tool in ("mvn", "java", "python3"):
        assert shutil.which(tool), f"{tool} not found: the recipe needs it"
    # The pom's dependency-plugin configuration puts copied artifacts here.
    tools = PROJECT_ROOT / "deploy/java-reader/target/jars"
    fetched = subprocess.run(
        [
            str(shutil.which("mvn")),
            "-q",
            "-B",
            "-f",
            str(PROJECT_ROOT / "deploy/java-reader/pom.xml"),
            "dependency:copy",
            "-Dartifact=org.apache.avro:avro-tools:1.12.0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fetched.returncode == 0, fetched.stdout[-2000:] + fetched.stderr[-2000:]
    (tmp_path / "avro-tools-1.12.0.jar").symlink_to(tools / "avro-tools-1.12.0.jar")
    publish_simulated(kafka_settings, 30, tmp_path / "spool", seed=43)

    script = kcat_recipe()
    first = script.splitlines()[0]
    assert first.startswith("B=")
    assert kafka_settings.bootstrap_servers is not None
    script = script.replace(
        first, f"B={kafka_settings.bootstrap_servers}; P={kafka_settings.topics.prefix}", 1
    )
    result = subprocess.run(
        [str(shutil.which("bash")), "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PATH": tools_path()},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    decoded = json.loads(result.stdout)

    # The message kcat took is the first of some partition: find it and decode it our way.
    value = (tmp_path / "msg.bin").read_bytes()
    topic = kafka_settings.topics.turn_events
    ours = next(
        TurnEventDeserializer(shipped_catalog())(msg.value()).event
        for msg in read_range(kafka_settings, topic, None, end_offsets(kafka_settings, topic))
        if msg.value() == value
    )
    for name in ("event_id", "session_id", "sequence", "pack_id", "domain"):
        assert decoded[name] == ours[name], name
    assert decoded["verdicts"]["refusal_emitted"] == ours["verdicts"]["refusal_emitted"]
    writer = json.loads((tmp_path / "writer.avsc").read_text())
    assert writer["name"] == "TurnEvent"
