"""The publisher on the real broker: round trip, outage, independent reader."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import avro.io
import avro.schema
import pytest

from tests.support.broker import local_broker_settings
from turnaudit.dead_letters import read_dead_letter_headers
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.schema_registry import registry_client
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker, free_port
from turnaudit.local_registry import LocalSchemaRegistry
from turnaudit.producers.adapter import TurnAuditEmitter
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import schema_path, shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

PINNED_FINGERPRINTS = {1: "877148bd22bee4a2", 2: "2be42553fbf66611"}
# Assigned by the publisher in its own copy: the runtime's event keeps them unset.
IDENTITY = {"event_id": "", "sequence": -1, "producer_id": "", "prev_hash": ""}


def read_all(settings: KafkaSettings, topic: str) -> list[Any]:
    return list(read_range(settings, topic, None, end_offsets(settings, topic)))


def decoded_events(settings: KafkaSettings) -> list[dict[str, Any]]:
    decode = TurnEventDeserializer(shipped_catalog())
    out = []
    for msg in read_all(settings, settings.topics.turn_events):
        event = decode(msg.value()).event
        assert msg.key() == event["session_id"].encode()
        out.append(event)
    return out


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    out = dict(event)
    if not isinstance(out["occurred_at"], int):
        out["occurred_at"] = int(out["occurred_at"].timestamp() * 1000)
    return out


def test_ten_thousand_events_across_both_versions_read_back_equal(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    sent: dict[str, dict[str, Any]] = {}
    for event in TurnRuntimeSimulator(42, schema_versions=(1, 2)).events(10_000):
        event_id = publisher.publish(event)
        sent[event_id] = event
    report = publisher.close()
    assert report.ok
    assert report.delivered == 10_000

    received = decoded_events(kafka_settings)
    assert len(received) == 10_000
    versions: Counter[int] = Counter()
    for event in received:
        original = sent[event["event_id"]]
        versions[original["verdicts"]["schema_version"]] += 1
        got = comparable(event)
        for name, value in original.items():
            if name in IDENTITY:
                assert value == IDENTITY[name], name  # publish() wrote into a copy
            else:
                assert got[name] == value, (event["event_id"], name)
    assert versions[1] > 3000
    assert versions[2] > 3000


def test_sequence_numbers_are_per_session_and_gapless(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    for event in TurnRuntimeSimulator(8).events(2000):
        publisher.publish(event)
    assert publisher.close().ok
    per_session: dict[str, list[int]] = defaultdict(list)
    for event in decoded_events(kafka_settings):
        per_session[event["session_id"]].append(event["sequence"])
    for session, sequences in per_session.items():
        assert sequences == list(range(len(sequences))), session


def test_writer_schemas_are_on_the_compacted_schemas_topic(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    publisher.close()
    announced = {
        msg.key().decode(): msg.value().decode()
        for msg in read_all(kafka_settings, kafka_settings.topics.schemas)
    }
    for schema in shipped_catalog().versions:
        assert json.loads(announced[schema.fingerprint_hex]) == json.loads(schema.schema_json)


def test_apache_avro_reads_a_published_message_from_the_avsc_files_alone(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    sent = {}
    for event in TurnRuntimeSimulator(9, schema_versions=(1, 2)).events(40):
        sent[publisher.publish(event)] = event
    assert publisher.close().ok

    # Apache's own implementation, given nothing but the shipped .avsc text.
    schemas = {}
    for version in (1, 2):
        with open(schema_path("turn_event", version)) as fh:
            schemas[version] = avro.schema.parse(fh.read())
    # CRC-64-AVRO of each schema's parsing canonical form, pinned here (and
    # checked against the specification's reference algorithm in test_wire).
    # Apache's Python `avro` 1.12 keeps logical types in its canonical form, so
    # its own fingerprint() differs: do not use it for single-object headers.
    fingerprints = {bytes.fromhex(PINNED_FINGERPRINTS[v]): v for v in (1, 2)}
    seen_versions = set()
    for msg in read_all(kafka_settings, kafka_settings.topics.turn_events):
        value = msg.value()
        assert value[:2] == b"\xc3\x01"
        version = fingerprints[value[2:10]]
        seen_versions.add(version)
        reader = avro.io.DatumReader(schemas[version])
        record = reader.read(avro.io.BinaryDecoder(io.BytesIO(value[10:])))
        original = sent[record["event_id"]]
        assert record["session_id"] == original["session_id"]
        assert record["sequence"] >= 0
        assert record["verdicts"] == original["verdicts"]
        assert record["action_assessment"] == original["action_assessment"]
        assert record["input_tokens"] == original["input_tokens"]
        # And Apache's reader resolves v1 data into v2 (and back) on its own.
        other = schemas[3 - version]
        resolved = avro.io.DatumReader(schemas[version], other).read(
            avro.io.BinaryDecoder(io.BytesIO(value[10:]))
        )
        assert resolved["verdicts"] == original["verdicts"]
    assert seen_versions == {1, 2}


def test_broker_stopped_mid_stream_loses_nothing(tmp_path: Path) -> None:
    """Its own broker, since this one is stopped and restarted."""
    broker = LocalKafkaBroker(local_broker_settings(tmp_path / "kafka"))
    broker.start()
    try:
        settings = KafkaSettings(
            bootstrap_servers=broker.bootstrap_servers, topics=TopicNames("outage."), partitions=3
        )
        ensure_topics(settings)
        publisher = TurnEventPublisher(settings, spool_dir=tmp_path / "spool", probe_interval=0.2)
        sim = TurnRuntimeSimulator(21).events(6000)
        published: list[str] = []

        def publish(n: int, pause: float = 0.0) -> None:
            for _ in range(n):
                published.append(publisher.publish(next(sim)))
                if pause:
                    time.sleep(pause)

        publish(2000)
        stopper = threading.Thread(target=broker.stop)
        stopper.start()  # the broker goes away while events keep coming
        publish(1500, pause=0.001)
        stopper.join()
        publish(1000)  # fully down: these go to the spool
        assert publisher.stats().spooled > 0
        broker.start()
        publish(1500)
        report = publisher.close(timeout=120)
        assert report.ok, report
        spooled = publisher.spooled_total  # every turn that went to the spool

        seen: Counter[str] = Counter()
        sequences: dict[str, list[int]] = defaultdict(list)
        decode = TurnEventDeserializer(shipped_catalog())
        for msg in read_all(settings, settings.topics.turn_events):
            event = decode(msg.value()).event
            seen[event["event_id"]] += 1
            sequences[event["session_id"]].append(event["sequence"])
        assert set(seen) == set(published)  # every event delivered
        assert len(published) == 6000
        duplicates = sum(n - 1 for n in seen.values())
        for session, numbers in sequences.items():
            # In order per session: a number appears only after all smaller ones;
            # a redelivered copy repeats an earlier number (and its event id).
            highest = -1
            for number in numbers:
                assert number <= highest + 1, (session, numbers)
                highest = max(highest, number)
        # The publisher's promise (docs/publisher.md): a copy is a spooled turn whose
        # original the broker took late; no other path sends a turn twice.
        assert spooled > 0
        assert duplicates <= spooled, (duplicates, spooled)
    finally:
        broker.stop()


def test_confluent_wire_format_through_the_broker_with_a_registry(
    kafka_settings: KafkaSettings, schema_registry: LocalSchemaRegistry, tmp_path: Path
) -> None:
    settings = dataclasses.replace(kafka_settings, schema_registry_url=schema_registry.url)
    publisher = TurnEventPublisher(settings, spool_dir=tmp_path / "spool")
    sent = {}
    for event in TurnRuntimeSimulator(12, schema_versions=(1, 2)).events(300):
        sent[publisher.publish(event)] = event
    assert publisher.close().ok
    decode = TurnEventDeserializer(shipped_catalog(), registry=registry_client(schema_registry.url))
    versions = Counter()
    for msg in read_all(settings, settings.topics.turn_events):
        assert msg.value()[0] == 0  # Confluent framing: magic byte, then the schema id
        decoded = decode(msg.value())
        versions[decoded.writer_version] += 1
        got = comparable(decoded.event)
        for name, value in sent[got["event_id"]].items():
            if name not in IDENTITY:
                assert got[name] == value, name
    assert sum(versions.values()) == 300
    assert set(versions) == {1, 2}


def test_a_full_client_queue_spills_to_the_spool_in_order(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    publisher = TurnEventPublisher(
        kafka_settings,
        spool_dir=tmp_path / "spool",
        producer_options={"queue.buffering.max.messages": 20, "linger.ms": 50},
    )
    spilled = 0
    for event in TurnRuntimeSimulator(13).events(3000):
        publisher.publish(event)
        spilled = max(spilled, publisher.stats().spooled)
    report = publisher.close(timeout=120)
    assert spilled > 0  # the tiny queue overflowed: publish() did not wait for it
    assert report.ok
    assert report.delivered == 3000
    per_session: dict[str, list[int]] = defaultdict(list)
    for event in decoded_events(kafka_settings):
        per_session[event["session_id"]].append(event["sequence"])
    assert sum(len(v) for v in per_session.values()) == 3000
    for session, numbers in per_session.items():
        assert numbers == list(range(len(numbers))), session


def test_events_a_closed_publisher_could_not_deliver_go_out_with_the_next_one(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    nowhere = dataclasses.replace(kafka_settings, bootstrap_servers=f"127.0.0.1:{free_port()}")
    stranded = TurnEventPublisher(nowhere, spool_dir=tmp_path / "spool", probe_interval=0.2)
    ids = [stranded.publish(e) for e in TurnRuntimeSimulator(14).events(200)]
    report = stranded.close(timeout=3)
    assert not report.ok
    assert report.undelivered == 200  # reported, and kept on disk
    assert report.delivered == 0

    successor = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    handed_over = successor.close(timeout=60)
    assert handed_over.ok
    received = decoded_events(kafka_settings)
    assert sorted(e["event_id"] for e in received) == sorted(ids)
    # The client queue the first publisher handed back went in front of what it
    # had spooled: every session is still in order.
    per_session: dict[str, list[int]] = defaultdict(list)
    for event in received:
        per_session[event["session_id"]].append(event["sequence"])
    for session, numbers in per_session.items():
        assert numbers == list(range(len(numbers))), session


def test_a_breaching_turn_goes_to_the_dead_letter_topic_with_its_reason(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    emitter = TurnAuditEmitter(
        publisher,
        lambda event, breaches: publisher.dead_letter(
            event, f"contract:{breaches[0].contract.value}", "; ".join(map(str, breaches))
        ),
    )
    events = list(TurnRuntimeSimulator(15).events(50))
    broken = events[10]
    broken["verdicts"]["refusal_emitted"] = broken["verdicts"]["hedge_injected"] = True
    for event in events:
        emitter.emit(event)
    assert publisher.close().ok
    assert emitter.breached == 1
    assert len(decoded_events(kafka_settings)) == 49  # never published as if valid
    (letter,) = read_all(kafka_settings, kafka_settings.topics.dlq)
    headers = read_dead_letter_headers(letter.headers())
    assert headers["reason"] == "contract:refusal_hedge_exclusive"
    assert "refusal_emitted and hedge_injected both true" in headers["error"]
    assert headers["stage"] == "producer"
    assert headers["topic"] == kafka_settings.topics.turn_events
    dead = TurnEventDeserializer(shipped_catalog())(letter.value()).event
    assert dead["session_id"] == broken["session_id"]
    assert dead["sequence"] == -1  # no sequence number taken: the session shows no gap


def test_journal_mode_from_four_threads_delivers_each_turn_once_in_order(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TURNAUDIT_PUBLISH_JOURNAL=1: four runtime threads share group commits (fewer
    fsyncs than turns), every turn reaches the topic once, in order per session, with
    its occurred_at as record timestamp, and a clean close leaves no journal."""
    monkeypatch.setenv("TURNAUDIT_PUBLISH_JOURNAL", "1")
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    journal = publisher._journal.journal if publisher._journal is not None else None
    assert journal is not None
    base = int(time.time() * 1000) - 60_000
    ids: list[str] = []

    def runtime(seed: int) -> None:
        for i, event in enumerate(
            TurnRuntimeSimulator(seed, schema_versions=(3,), concurrent_sessions=5).events(150)
        ):
            event["occurred_at"] = base + i
            ids.append(publisher.publish(event))

    threads = [threading.Thread(target=runtime, args=(70 + n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    commits = journal.commits
    report = publisher.close()
    assert report.ok, report
    assert report.delivered == 600
    assert commits < 600
    assert list((tmp_path / "spool" / "journal").iterdir()) == []
    decode = TurnEventDeserializer(shipped_catalog())
    seen: Counter[str] = Counter()
    sequences: dict[str, list[int]] = defaultdict(list)
    for msg in read_all(kafka_settings, kafka_settings.topics.turn_events):
        event = decode(msg.value()).event
        seen[event["event_id"]] += 1
        sequences[event["session_id"]].append(event["sequence"])
        assert msg.timestamp()[1] == event["occurred_at"]
    assert set(seen) == set(ids)
    assert max(seen.values()) == 1
    for session, numbers in sequences.items():
        assert numbers == list(range(len(numbers))), session
