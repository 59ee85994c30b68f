"""docs/subscribers.md: its facts are the software's, and its Python recipe reads a real broker."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import avro.schema
import pytest

from tests.consumers.streams import publish_simulated
from turnaudit.commands.schemas import java_long
from turnaudit.kafka.dead_letters import DeadLetterReason, dead_letter_headers
from turnaudit.kafka.reading import end_offsets, read_range
from turnaudit.kafka.topics import topic_specs
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings, TopicNames

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "subscribers.md").read_text()


def python_recipe() -> str:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE, re.DOTALL)
    assert len(blocks) == 1
    return blocks[0]


def test_the_guide_names_every_topic_and_its_key() -> None:
    prefix = "turn-audit."
    for spec in topic_specs(KafkaSettings(topics=TopicNames(prefix))):
        assert f"`<prefix>{spec.name.removeprefix(prefix)}`" in GUIDE, spec.name
    assert "compact, 1 partition" in GUIDE


def test_the_guide_names_every_dead_letter_header_and_reason() -> None:
    headers = dead_letter_headers(
        reason="r", error="e", topic="t", partition=0, offset=0, stage="s"
    )
    for name, _ in headers:
        assert f"`{name}`" in GUIDE or name in GUIDE, name
    for reason in DeadLetterReason:
        assert reason.value.removeprefix("contract:") in GUIDE, reason


def test_the_worked_fingerprint_example_is_the_real_one() -> None:
    v2 = shipped_catalog("turn_event").version(2)
    spaced = " ".join(f"{b:02x}" for b in v2.fingerprint)
    assert f"c3 01 {spaced}" in GUIDE
    assert f"`{v2.fingerprint_hex}`" in GUIDE
    assert f"`{java_long(v2.fingerprint)}`" in GUIDE
    assert f"`{v2.fingerprint[::-1].hex()}`" in GUIDE


def test_recomputing_with_apache_python_avro_gives_other_fingerprints_as_the_guide_says() -> None:
    """Why the fingerprints are published: this library disagrees on logical types."""
    for schema in shipped_catalog("turn_event").versions:
        theirs = bytes(avro.schema.parse(schema.schema_json).fingerprint("CRC-64-AVRO"))
        assert theirs not in (schema.fingerprint, schema.fingerprint[::-1])
    trace = shipped_catalog("htir_trace").latest  # no logical types: they agree
    assert bytes(avro.schema.parse(trace.schema_json).fingerprint("CRC-64-AVRO")) == (
        trace.fingerprint
    )
    assert "Apache's Python `avro` 1.12" in GUIDE


@pytest.mark.broker
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
        cwd=ROOT,
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


@pytest.mark.broker
def test_the_kcat_and_avro_tools_recipe_decodes_a_turn_event_as_written(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    for tool in ("kcat", "jq", "xxd", "mvn", "java"):
        assert shutil.which(tool), f"{tool} not found: run `make promtool` (kcat, jq, xxd)"
    # The pom's dependency-plugin configuration puts copied artifacts here.
    tools = ROOT / "deploy/java-reader/target/jars"
    fetched = subprocess.run(
        [
            str(shutil.which("mvn")),
            "-q",
            "-B",
            "-f",
            str(ROOT / "deploy/java-reader/pom.xml"),
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
