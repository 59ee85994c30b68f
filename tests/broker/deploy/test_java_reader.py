"""An independent reader: Java decodes the topics with only the .avsc files and the schemas topic,
and, in registry mode, with Apicurio Registry's own Avro deserializer and the real registry.

deploy/java-reader/ is built with Maven from the repository (Apache Avro's
BinaryMessageDecoder, the Kafka Java client, both from Maven Central). It
reads the schemas topic (key: fingerprint hex, the 8 wire bytes), adds every
shipped version of the record to its decoder, reads the real broker's
turn-events (written with v1 and v2) and htir-traces topics, and prints each
record decoded into the newest version and re-encoded with it. The test
compares that, record by record, with the project's own decode, and Java's
own fingerprints of the .avsc files with the published ones. In registry mode
(RegistryReader) every writer schema comes from the registry by the message's id.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest
from prometheus_client import CollectorRegistry

from tests.support import PROJECT_ROOT
from tests.support.registry import subject_ids
from tests.support.streams import (
    consumed_everything,
    publish_simulated,
    running,
    service_settings,
    wait_for,
)
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.local_registry import LocalSchemaRegistry
from turnaudit.serialization.schemas import decoding_schema, shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

READER_CLASS = "io.turnaudit.reader.TopicReader"
REGISTRY_READER_CLASS = "io.turnaudit.reader.RegistryReader"

pytestmark = pytest.mark.broker

READER = PROJECT_ROOT / "deploy" / "java-reader"


@pytest.fixture(scope="module")
def java_reader() -> list[str]:
    """The reader's java command line, built with Maven (compile + its runtime jars)."""
    mvn, java = shutil.which("mvn"), shutil.which("java")
    assert mvn is not None, "Maven is needed (apt-get install maven)"
    assert java is not None, "a Java 17+ runtime is needed"
    build = subprocess.run(
        [mvn, "-q", "-B", "-f", str(READER / "pom.xml"), "compile", "dependency:copy-dependencies"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    classpath = f"{READER / 'target/classes'}:{READER / 'target/jars'}/*"
    return [java, "-cp", classpath, READER_CLASS]


def java_read(
    command: list[str],
    settings: KafkaSettings,
    topic: str,
    record: str,
    count: int,
    *,
    avsc_dir: Path = PROJECT_ROOT / "schemas",
) -> dict[str, list[list[str]]]:
    assert settings.bootstrap_servers is not None
    result = subprocess.run(
        [
            *command,
            settings.bootstrap_servers,
            settings.topics.schemas,
            topic,
            str(avsc_dir),
            record,
            str(count),
            "120000",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines: dict[str, list[list[str]]] = {"avsc": [], "schema": [], "record": []}
    for line in result.stdout.splitlines():
        kind, *fields = line.split("\t")
        lines[kind].append(fields)
    return lines


def published_fingerprints() -> dict[str, tuple[str, int]]:
    rows = [
        line.split()
        for line in (PROJECT_ROOT / "schemas/fingerprints.txt").read_text().splitlines()
        if not line.startswith("#")
    ]
    return {row[4]: (row[0], int(row[1])) for row in rows}


def compare(
    settings: KafkaSettings, topic: str, record: str, lines: dict[str, list[list[str]]]
) -> set[str]:
    """Java's records equal ours; the writer fingerprints seen."""
    catalog = shipped_catalog(record)
    ours = TurnEventDeserializer(catalog)
    # Read as the project's readers read it: timestamp-millis as the epoch-ms long.
    latest = decoding_schema(catalog.latest.schema_json).parsed
    fields = {f["name"] for f in latest["fields"]}
    originals = {
        (msg.partition(), msg.offset()): msg
        for msg in read_range(settings, topic, None, end_offsets(settings, topic))
    }
    assert len(lines["record"]) == len(originals) > 0
    writers: set[str] = set()
    for partition, offset, key, writer, body in lines["record"]:
        msg = originals[(int(partition), int(offset))]
        assert key == (msg.key() or b"").decode()
        assert writer == msg.value()[2:10].hex()
        theirs: Any = fastavro.schemaless_reader(io.BytesIO(bytes.fromhex(body)), latest, None)
        # Ours decodes a shipped version with its own schema and keeps its legacy
        # fields (v1's per-field verdicts) beside the newest version's: compare
        # the newest version's fields, all of them.
        mine = ours(msg.value()).event
        assert set(theirs) == fields
        assert theirs == {name: mine[name] for name in fields}, (topic, partition, offset)
        writers.add(writer)
    # Java's own fingerprints of the .avsc files are the published ones.
    published = published_fingerprints()
    for file, wire_hex, java_long in lines["avsc"]:
        assert published[file] == (wire_hex, int(java_long)), file
    return writers


def test_java_decodes_events_of_every_version_and_traces_as_we_do(
    kafka_settings: KafkaSettings, tmp_path: Path, java_reader: list[str]
) -> None:
    publish_simulated(kafka_settings, 600, tmp_path / "spool", seed=23)
    registry = CollectorRegistry()
    sink = HtirFeederSink(kafka_settings, registry=registry, idle_timeout=1.0)
    service = ConsumerService(
        service_settings(kafka_settings, ServiceName.HTIR_FEEDER, "java-reader-feeder"),
        sink,
        registry=registry,
    )
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with running(service):
        assert wait_for(consumed_everything(service, end), timeout=90)
    assert sink.published > 0

    events = java_read(
        java_reader,
        kafka_settings,
        kafka_settings.topics.turn_events,
        "turn_event",
        sum(end.values()),
    )
    writers = compare(kafka_settings, kafka_settings.topics.turn_events, "turn_event", events)
    shipped = {s.fingerprint_hex for s in shipped_catalog("turn_event").versions}
    assert writers == shipped  # both versions were written, and Java read both

    traces_topic = kafka_settings.topics.htir_traces
    trace_count = sum(end_offsets(kafka_settings, traces_topic).values())
    traces = java_read(java_reader, kafka_settings, traces_topic, "htir_trace", trace_count)
    compare(kafka_settings, traces_topic, "htir_trace", traces)

    # Every writer schema the topics use was announced on the schemas topic.
    announced = {key for key, _ in events["schema"]}
    assert shipped | {shipped_catalog("htir_trace").latest.fingerprint_hex} <= announced
    names = dict((key, name) for key, name in events["schema"])
    assert (
        names[shipped_catalog("htir_trace").latest.fingerprint_hex] == "io.turnaudit.htir.HtirTrace"
    )

    # A reader that ships only the newest .avsc still decodes every event: the
    # older writer schemas come from the schemas topic, looked up by the key.
    newest_only = tmp_path / "newest-only"
    newest_only.mkdir()
    newest = shipped_catalog("turn_event").latest
    shutil.copy(PROJECT_ROOT / f"schemas/turn_event.v{newest.version}.avsc", newest_only)
    from_topic = java_read(
        java_reader,
        kafka_settings,
        kafka_settings.topics.turn_events,
        "turn_event",
        sum(end.values()),
        avsc_dir=newest_only,
    )
    assert [row[0] for row in from_topic["avsc"]] == [f"turn_event.v{newest.version}.avsc"]
    assert compare(kafka_settings, kafka_settings.topics.turn_events, "turn_event", from_topic) == (
        shipped
    )


def test_java_decodes_every_turn_of_a_registry_mode_run_with_apicurios_own_deserializer(
    kafka_settings: KafkaSettings,
    schema_registry: LocalSchemaRegistry,
    tmp_path: Path,
    java_reader: list[str],
) -> None:
    settings = replace(kafka_settings, schema_registry_url=schema_registry.url)
    publish_simulated(settings, 600, tmp_path / "spool", seed=29)
    topic = settings.topics.turn_events
    count = sum(end_offsets(settings, topic).values())
    newest = shipped_catalog("turn_event").latest
    port = schema_registry.settings.port
    result = subprocess.run(
        [
            *java_reader[:-1],
            REGISTRY_READER_CLASS,
            settings.bootstrap_servers or "",
            topic,
            f"http://127.0.0.1:{port}/apis/registry/v2",  # Apicurio's own API
            str(PROJECT_ROOT / f"schemas/turn_event.v{newest.version}.avsc"),
            str(count),
            "120000",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ours = decoder_for(settings)
    latest = decoding_schema(newest.schema_json).parsed
    fields = {f["name"] for f in latest["fields"]}
    originals = {
        (m.partition(), m.offset()): m
        for m in read_range(settings, topic, None, end_offsets(settings, topic))
    }
    records = [line.split("\t")[1:] for line in result.stdout.splitlines()]
    assert len(records) == len(originals) == count > 0
    ids = set(subject_ids(schema_registry.url, f"{topic}-value").values())
    writers: set[str] = set()
    for partition, offset, key, writer, body in records:
        msg = originals[(int(partition), int(offset))]
        assert key == (msg.key() or b"").decode()
        assert msg.value()[0] == 0  # Confluent framing, an id the subject holds
        assert int.from_bytes(msg.value()[1:5], "big") in ids
        decoded = ours(msg.value())
        # The writer schema Apicurio's deserializer got for the id is the one ours did.
        assert writer == (ours.writer_fingerprint(decoded) or b"").hex()
        theirs: Any = fastavro.schemaless_reader(io.BytesIO(bytes.fromhex(body)), latest, None)
        assert set(theirs) == fields
        assert theirs == {name: decoded.event[name] for name in fields}, (partition, offset)
        writers.add(writer)
    assert writers == {s.fingerprint_hex for s in shipped_catalog("turn_event").versions}
