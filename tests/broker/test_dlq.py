"""``turnaudit dlq`` on the real broker: turns parked for a schema the consumer did not
know yet come back once the schema is announced, counted once; what would fail
again stays parked and is reported; a second redrive writes nothing.

And a Schema Registry that fails, then recovers, costs a running service no dead letter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import BOUND_S, Case, run_case
from tests.support.events import encode, turn
from tests.support.registry_standin import FlakyRegistry
from tests.support.streams import (
    consumed_everything,
    http_get,
    running,
    service_settings,
    wait_for,
)
from turnaudit.cli import main
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.dead_letters import REDRIVEN_FROM_HEADER
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.records import record_headers
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.serialization.wire import ConfluentIdSerializer, SingleObjectSerializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def newer_schema(field: str) -> Any:
    """The newest shipped schema plus a defaulted field: what a newer runtime writes."""
    schema = json.loads(shipped_catalog().latest.schema_json)
    schema["fields"].append({"name": field, "type": "string", "default": "x"})
    return schema_from_json(json.dumps(schema), name="turn_event", version=99)


def produce(settings: KafkaSettings, topic: str, rows: list[tuple[bytes, bytes]]) -> None:
    producer = Producer(settings.client_config())
    for key, value in rows:
        producer.produce(topic, value, key)
    assert producer.flush(10) == 0


def samples(port: int, name: str) -> float:
    _, text = http_get(port, "/metrics")
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


def outcome(port: int, value: str) -> float:
    _, text = http_get(port, "/metrics")
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "turnaudit_consumer_messages_total" and s.labels["outcome"] == value
    )


def stored(settings: KafkaSettings, topic: str) -> list[Any]:
    return list(read_range(settings, topic, None, end_offsets(settings, topic)))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if "--json" in argv else captured.out


@pytest.fixture
def env(kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> KafkaSettings:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", kafka_settings.topics.prefix)
    return kafka_settings


class TestRedrive:
    def test_parked_for_an_unknown_schema_then_announced_comes_back_counted_once(
        self,
        env: KafkaSettings,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        settings = env
        topics = settings.topics
        later = newer_schema("locale")  # announced after the turn was parked
        never = newer_schema("region")  # never announced: still fails
        live = [(f"s-{n}".encode(), encode(turn(f"s-{n}", 0))) for n in range(6)]
        service = verdict_metrics_service(
            service_settings(settings, ServiceName.VERDICT_METRICS, "g-dlq-metrics"),
            registry=CollectorRegistry(),
        )
        with running(service):
            port = service.http_port
            assert port is not None
            produce(
                settings,
                topics.turn_events,
                [
                    *live,
                    (
                        b"s-late",
                        SingleObjectSerializer(later)(turn("s-late", 0) | {"locale": "fr"}),
                    ),
                    (
                        b"s-late",
                        SingleObjectSerializer(later)(turn("s-late", 1) | {"locale": "fr"}),
                    ),
                    (b"s-never", SingleObjectSerializer(never)(turn("s-never", 0))),
                    (b"s-junk", b"not avro at all"),
                ],
            )
            end = end_offsets(settings, topics.turn_events)
            assert wait_for(consumed_everything(service, end))
            assert wait_for(lambda: len(stored(settings, topics.dlq)) == 4)
            assert samples(port, "turnaudit_turns_total") == 6

            code, counted = cli(capsys, "dlq", "count", "--json")
            assert code == 0
            assert counted["count"] == 4
            assert counted["by_reason"] == {"unknown_framing": 1, "unknown_schema": 3}
            assert counted["by_service"] == {"verdict-metrics": 4}
            code, listed = cli(
                capsys,
                "dlq",
                "list",
                "--json",
                "--reason",
                "unknown_schema",
                "--service",
                "verdict-metrics",
            )
            assert code == 0
            assert len(listed) == 3
            position = listed[0]["position"]
            code, shown = cli(capsys, "dlq", "show", position, "--json")
            assert code == 0
            assert shown["headers"]["__connect.errors.exception.class.name"] == (
                "turnaudit.errors.SchemaNotFoundError"
            )

            # Before the schema is known every letter would fail again.
            code, plan = cli(capsys, "dlq", "redrive", "--dry-run", "--json")
            assert code == 1
            assert plan["redriven"] == []
            assert plan["refused_by_reason"] == {"unknown_framing": 1, "unknown_schema": 3}

            produce(
                settings,
                topics.schemas,
                [(later.fingerprint_hex.encode(), later.schema_json.encode())],
            )
            code, plan = cli(capsys, "dlq", "redrive", "--dry-run", "--json")
            assert code == 1  # two letters still refused
            assert len(plan["redriven"]) == 2
            assert plan["refused_by_reason"] == {"unknown_framing": 1, "unknown_schema": 1}
            assert end_offsets(settings, topics.turn_events) == end  # a dry run writes nothing

            code, done = cli(capsys, "dlq", "redrive", "--json")
            assert code == 1
            assert done["written"] == 2
            assert sorted(done["redriven"]) == sorted(plan["redriven"])
            after = end_offsets(settings, topics.turn_events)
            assert sum(after.values()) == sum(end.values()) + 2
            assert wait_for(consumed_everything(service, after))
            assert wait_for(lambda: samples(port, "turnaudit_redriven_turns_total") == 2)
            assert samples(port, "turnaudit_turns_total") == 6  # the live counters: untouched
            assert outcome(port, "redriven") == 2
            assert len(stored(settings, topics.dlq)) == 4  # nothing parked again

            # Redriven twice: nothing written, the letters reported as done before.
            code, again = cli(capsys, "dlq", "redrive", "--json")
            assert code == 1
            assert again["redriven"] == []
            assert sorted(again["already_redriven"]) == sorted(plan["redriven"])
            assert end_offsets(settings, topics.turn_events) == after
            code, text = cli(capsys, "dlq", "redrive", "--reason", "unknown_schema")
            assert "already redriven by an earlier run, skipped: 2" in text
            assert "unknown_schema: 1" in text or '"unknown_schema": 1' in text

            # A redelivery of a redriven copy (its bytes written once more) is not
            # counted again: the service dedupes by event id.
            copies = [
                m
                for m in stored(settings, topics.turn_events)
                if any(n == REDRIVEN_FROM_HEADER for n, _ in record_headers(m))
            ]
            assert len(copies) == 2
            redelivered = Producer(settings.client_config())
            redelivered.produce(
                topics.turn_events,
                copies[0].value(),
                copies[0].key(),
                headers=record_headers(copies[0]),
            )
            assert redelivered.flush(10) == 0
            final = end_offsets(settings, topics.turn_events)
            assert wait_for(consumed_everything(service, final))
            assert samples(port, "turnaudit_redriven_turns_total") == 2
            assert samples(port, "turnaudit_redelivered_turns_total") == 1

            # verify: each turn once (the original decodes now, the copies are
            # duplicates), and the service's live and redriven counters together agree.
            code, report = cli(
                capsys,
                "verify",
                "--json",
                "--metrics-url",
                f"http://127.0.0.1:{port}/metrics",
                "--metrics-settle",
                "1",
            )
        assert report["counts"]["turns"] == 8
        kinds = {f["kind"] for f in report["unexplained"]}
        assert "uncounted" not in kinds, report["unexplained"]
        assert code == 0, report["unexplained"]


class TestOneLineFailures:
    @pytest.mark.parametrize(
        ("argv", "code", "says"),
        [
            (["dlq", "show", "1:999999"], 1, "no letter at 1:999999: t-"),
            (["dlq", "show", "99:0"], 2, "dlq has no partition 99 (partitions 0-2)"),
        ],
    )
    def test_a_letter_that_is_not_there_is_one_line(
        self,
        kafka_settings: KafkaSettings,
        tmp_path: Path,
        argv: list[str],
        code: int,
        says: str,
    ) -> None:
        outcome = run_case(
            Case(
                "dlq",
                argv,
                {
                    "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers or "",
                    "TURNAUDIT_TOPIC_PREFIX": kafka_settings.topics.prefix,
                },
            ),
            tmp_path,
        )
        lines = outcome.stderr.strip().splitlines()
        assert len(lines) == 1, outcome.stderr
        assert lines[0].startswith("turnaudit dlq: ")
        assert says in lines[0]
        assert outcome.returncode == code
        assert outcome.elapsed < BOUND_S


@pytest.fixture
def flaky() -> Iterator[FlakyRegistry]:
    registry = FlakyRegistry(2, shipped_catalog().version(4).schema_json)
    yield registry
    registry.server.shutdown()


class TestRegistryOutage:
    def test_a_registry_that_fails_then_recovers_costs_a_running_service_no_dead_letter(
        self,
        kafka_settings: KafkaSettings,
        flaky: FlakyRegistry,
    ) -> None:
        settings = replace(kafka_settings, schema_registry_url=flaky.url)
        service = verdict_metrics_service(
            service_settings(settings, ServiceName.VERDICT_METRICS, "g-dlq-registry"),
            registry=CollectorRegistry(),
        )
        serialize = ConfluentIdSerializer(shipped_catalog().version(4), 31)
        with running(service):
            port = service.http_port
            assert port is not None
            produce(
                settings,
                settings.topics.turn_events,
                [(b"s-reg", serialize(turn("s-reg", n))) for n in range(3)],
            )
            end = end_offsets(settings, settings.topics.turn_events)
            assert wait_for(consumed_everything(service, end))
            assert wait_for(lambda: samples(port, "turnaudit_turns_total") == 3)
            assert samples(port, "turnaudit_dead_letters_total") == 0
        assert stored(settings, settings.topics.dlq) == []
        # Two failed answers, then the schema, resolved once for all three turns (the
        # retries are the registry client's or the decoder's, whichever comes first).
        assert flaky.requests == 3
