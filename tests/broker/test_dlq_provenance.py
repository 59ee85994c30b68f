"""``dlq redrive`` writes only what it can prove was on the turn topic, on the real broker:
a writer of the dead-letter topic crafts letters (other bytes under a real turn's origin,
an origin past the end, a turn whose origin was deleted and that no checkpoint signs) and
every one is refused by name (exit 1) while the honest letter goes back once; once the
origin is deleted, a turn a valid signed checkpoint names goes back with ``--keyring``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.events import encode, turn
from turnaudit.cli import main
from turnaudit.dead_letters import dead_letter_headers
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.keyring import keyring_entry_toml
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key

pytestmark = pytest.mark.broker

DECODE = TurnEventDeserializer(shipped_catalog())


def park(settings: KafkaSettings, letters: list[tuple[bytes, bytes, int, int]]) -> None:
    """Letters as any writer of the dead-letter topic can write them: (key, value, origin
    partition, origin offset) of the turn topic, parked for a schema unknown then."""
    producer = Producer(settings.client_config())
    for key, value, partition, offset in letters:
        headers = dead_letter_headers(
            reason="unknown_schema",
            error="schema unknown",
            topic=settings.topics.turn_events,
            partition=partition,
            offset=offset,
            stage="log-sink/g",
        )
        producer.produce(settings.topics.dlq, value, key, headers=list(headers))
    assert producer.flush(10) == 0


def redrive(
    settings: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
) -> tuple[int, dict[str, Any]]:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    capsys.readouterr()
    code = main(["dlq", "redrive", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def delete_up_to(settings: KafkaSettings, partition: int, offset: int) -> None:
    admin = AdminClient(settings.client_config())
    tp = TopicPartition(settings.topics.turn_events, partition, offset)
    for future in admin.delete_records([tp]).values():
        future.result(10)


def test_only_letters_that_were_on_the_topic_go_back(
    kafka_settings: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = kafka_settings
    topic = settings.topics.turn_events
    real = encode(turn("s-real", 0))
    producer = Producer(settings.client_config())
    producer.produce(topic, real, b"s-real", partition=0)
    assert producer.flush(10) == 0
    (stored,) = list(read_range(settings, topic, None, end_offsets(settings, topic)))
    at = stored.offset() or 0
    forged = encode(turn("s-real", 0, refusal_emitted=True))
    park(
        settings,
        [
            (b"s-real", forged, 0, at),  # other bytes under a real turn's origin
            (b"s-real", real, 0, at),  # honest: the very message stored there
            (b"s-other", encode(turn("s-other", 0)), 0, at + 50),  # nothing stored there
            (b"s-real", real, 1, at),  # a real turn's bytes claiming another partition
        ],
    )
    code, plan = redrive(settings, monkeypatch, capsys)
    assert code == 1
    assert len(plan["redriven"]) == 1
    assert plan["refused_by_reason"] == {"not_the_original": 3}, plan
    again = [m.value() for m in read_range(settings, topic, None, end_offsets(settings, topic))]
    assert again == [real, real]  # the original and its one redriven copy
    # Retention (here: a deletion) takes the origins, and the redriven copy with them:
    # no letter can be proved now (the forged one, the honest one, the later turn's).
    later = encode(turn("s-later", 0))
    producer.produce(topic, later, b"s-later", partition=0)
    assert producer.flush(10) == 0
    end = end_offsets(settings, topic)[0]
    delete_up_to(settings, 0, end)
    park(settings, [(b"s-later", later, 0, end - 1)])
    code, plan = redrive(settings, monkeypatch, capsys)
    assert code == 1
    assert plan["redriven"] == []
    assert plan["refused_by_reason"] == {"not_the_original": 2, "unprovable": 3}, plan


def test_a_deleted_origin_goes_back_when_a_signed_checkpoint_names_the_turn(
    kafka_settings: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    settings = kafka_settings
    topic = settings.topics.turn_events
    made = generate_keys(tmp_path / "keys", "runtime-1")
    key = load_signing_key(made.private_path, "runtime-1")
    publisher = TurnEventPublisher(
        settings,
        spool_dir=tmp_path / "spool",
        checkpoints=CheckpointSettings(key, interval_s=60.0, max_turns=1000),  # one, at close
    )
    for event in TurnRuntimeSimulator(8, schema_versions=(5,), concurrent_sessions=2).events(30):
        publisher.publish(event)
    assert publisher.close().ok  # the final checkpoint signs the stream's head
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(
        keyring_entry_toml("runtime-1", key.public_pem(), datetime(2020, 1, 1, tzinfo=UTC))
    )
    messages = list(read_range(settings, topic, None, end_offsets(settings, topic)))
    by_stream: dict[tuple[str, str], list[Any]] = {}
    for m in messages:
        event = DECODE(m.value()).event
        by_stream.setdefault((event["session_id"], event["producer_id"]), []).append(m)
    stream = max(by_stream.values(), key=len)
    assert len(stream) >= 2
    head, middle = stream[-1], stream[0]  # the signed head, and a turn no checkpoint names
    partition = head.partition() or 0
    delete_up_to(settings, partition, end_offsets(settings, topic)[partition])
    park(
        settings,
        [
            (head.key() or b"", head.value() or b"", partition, head.offset() or 0),
            (middle.key() or b"", middle.value() or b"", partition, middle.offset() or 0),
        ],
    )
    code, plan = redrive(settings, monkeypatch, capsys)
    assert plan["refused_by_reason"] == {"unprovable": 2}  # no keyring: nothing provable
    code, plan = redrive(settings, monkeypatch, capsys, "--keyring", str(keyring))
    assert code == 1
    assert len(plan["redriven"]) == 1  # the head: a valid checkpoint signs it
    assert plan["refused_by_reason"] == {"unprovable": 1}  # the middle turn: nothing signs it
