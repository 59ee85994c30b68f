"""Bad messages mixed into valid traffic on the real broker: one run of a
service takes every valid event, accounts for every bad one, never restarts."""

from __future__ import annotations

import io
import json
import random
import threading
from collections.abc import Sequence
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from tests.support.events import breaking_events, encode, turn
from tests.support.streams import (
    consumed_everything,
    publish_simulated,
    running,
    service_settings,
    wait_for,
)
from turnaudit.consumers.runtime import BatchingSink, ConsumedTurn, ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.dead_letters import read_dead_letter_headers
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.records import record_headers
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


class RecordingSink(BatchingSink):
    def __init__(self) -> None:
        super().__init__()
        self.positions: set[tuple[int, int]] = set()
        self.event_ids: set[str] = set()
        self._lock = threading.Lock()

    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        with self._lock:
            for t in turns:
                self.positions.add((t.partition, t.offset))
                self.event_ids.add(t.event["event_id"])


def bad_corpus(settings: KafkaSettings, rng: random.Random) -> list[bytes]:
    """Random bytes, mutated and cut valid events, foreign schemas, boundary sizes."""
    valid = encode(turn("s-bad", 0))
    fp = shipped_catalog().latest.fingerprint
    corpus = [rng.randbytes(rng.randrange(1, 400)) for _ in range(40)]
    for _ in range(60):
        position = rng.randrange(len(valid))
        corpus.append(valid[:position] + bytes([rng.randrange(256)]) + valid[position + 1 :])
    corpus += [valid[: rng.randrange(len(valid))] for _ in range(30)]
    corpus += [valid + rng.randbytes(rng.randrange(1, 20)) for _ in range(10)]
    corpus += [b"", b"\xc3", b"\xc3\x01", b"\xc3\x01" + fp, b"\x00\x00\x00\x00\x01\x02"]
    corpus += [b"\xc3\x01" + fp + b"\x03" * 1_000_000]  # near the topic's limit
    micros = turn("s-micros", 0)
    micros["occurred_at"] = 1_764_000_000_000_000
    corpus.append(encode(micros))
    corpus += [encode(e) for e in breaking_events().values()]
    # A schema on the schemas topic that does not resolve into the reader.
    schema = json.loads(shipped_catalog().latest.schema_json)
    schema["name"] = "SomethingElse"
    foreign = schema_from_json(json.dumps(schema), name="turn_event", version=-1)
    producer = Producer(settings.client_config())
    producer.produce(
        settings.topics.schemas, foreign.schema_json.encode(), foreign.fingerprint_hex.encode()
    )
    producer.produce(settings.topics.schemas, b"{]", b"junk")
    assert producer.flush(10) == 0
    body = io.BytesIO()
    fastavro.schemaless_writer(body, foreign.parsed, turn("s-foreign", 0))
    corpus.append(b"\xc3\x01" + foreign.fingerprint + body.getvalue())
    return corpus


def test_bad_messages_in_valid_traffic_every_valid_event_in_every_bad_one_accounted_for(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    rng = random.Random(11)
    bad = bad_corpus(kafka_settings, rng)
    sink = RecordingSink()
    registry = CollectorRegistry()
    service = ConsumerService(
        service_settings(kafka_settings, ServiceName.LOG_SINK, "g-mixed"),
        sink,
        registry=registry,
        serve_http=False,
    )
    producer = Producer(kafka_settings.client_config(**{"message.max.bytes": 2_000_000}))
    with running(service):
        publisher = threading.Thread(
            target=publish_simulated, args=(kafka_settings, 3000, tmp_path / "spool")
        )
        publisher.start()
        for value in bad:  # interleaved with the publisher's traffic
            producer.produce(
                kafka_settings.topics.turn_events, value, f"bad-{rng.randrange(20)}".encode()
            )
            producer.poll(0.001)
        assert producer.flush(30) == 0
        publisher.join()
        end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
        assert wait_for(consumed_everything(service, end))
        assert service.health.liveness().ok  # one run throughout
    topic = kafka_settings.topics.turn_events
    keys = {
        (m.partition(), m.offset()): m.key() or b""
        for m in read_range(kafka_settings, topic, None, end)
    }
    valid = {where for where, key in keys.items() if not key.startswith(b"bad-")}
    letters = {
        (int(h["partition"]), int(h["offset"])): h
        for h in (
            read_dead_letter_headers(record_headers(m))
            for m in read_range(
                kafka_settings,
                kafka_settings.topics.dlq,
                None,
                end_offsets(kafka_settings, kafka_settings.topics.dlq),
            )
        )
    }
    # Every message on the topic: taken by the sink or dead-lettered, never both, never neither.
    assert sink.positions.isdisjoint(letters)
    assert sink.positions | set(letters) == set(keys)
    assert len(keys) == 3000 + len(bad)
    # Every valid event of the simulated run reached the sink, each once.
    assert len(valid) == 3000
    assert valid <= sink.positions
    reasons = {h["reason"] for h in letters.values()}
    assert {"unknown_framing", "undecodable", "unusable_schema"} <= reasons
    assert any(h.get("truncated") == "true" for h in letters.values())
    dead_lettered = sum(
        registry.get_sample_value("turnaudit_dead_letters_total", {"reason": r}) or 0
        for r in reasons
    )
    assert dead_lettered == len(letters)
