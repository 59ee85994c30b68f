"""Registry mode against a real schema registry (Apicurio Registry, its Confluent-compatible
API): the publisher registers every TurnEvent version under ``<topic>-value`` after setting
and reading back FULL_TRANSITIVE, frames each turn with the id, and refuses to start (one
line naming the subject) on a schema the subject's compatibility refuses; the services,
verify, replay, tail and the reading API resolve the ids from it, and verify over the run
is clean (v5 chain hashes bind the fingerprint of the schema each id resolves to)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.cli import run_turnaudit
from tests.support.registry import ccompat, subject_ids
from tests.support.services import service_env, turnaudit_process
from tests.support.streams import (
    consumed_everything,
    running,
    scrape,
    service_settings,
    total,
    wait_for,
)
from tests.support.verify_helpers import fresh_topics
from turnaudit.consumers.log_sink import log_sink_service, service_logging
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import LogSinkSettings, ServiceName
from turnaudit.errors import RegistryUnavailableError, SchemaNotFoundError
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.schema_registry import ConfluentSerializer, registry_client
from turnaudit.local_registry import LocalSchemaRegistry
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.reading import read_turn_events
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.serialization.wire import Framing, TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

TURNS = 900
CATALOG = shipped_catalog()


def registry_env(settings: KafkaSettings) -> dict[str, str]:
    """A user's environment for registry mode: the cluster, the prefix, the registry URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNAUDIT_")}
    return env | {
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
        "TURNAUDIT_SCHEMA_REGISTRY_URL": settings.schema_registry_url or "",
        "TURNAUDIT_CONNECT_TIMEOUT_S": "5",
    }


def subject(settings: KafkaSettings) -> str:
    return f"{settings.topics.turn_events}-value"


@pytest.fixture(scope="module")
def registry_run(
    kafka_bootstrap: str,
    schema_registry: LocalSchemaRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[KafkaSettings, Path]:
    """One registry-mode run, published by ``turnaudit simulate`` as a real process: every
    shipped version mixed, v5 (whose chain hash binds the writer schema) the most."""
    settings = replace(fresh_topics(kafka_bootstrap), schema_registry_url=schema_registry.url)
    tmp = tmp_path_factory.mktemp("registry-run")
    ran = run_turnaudit(
        "simulate",
        "--events",
        str(TURNS),
        "--schema-versions",
        "5:4,4,3,2,1",
        "--spool-dir",
        str(tmp / "spool"),
        "--truth",
        str(tmp / "truth.json"),
        env=registry_env(settings),
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    return settings, tmp


def test_the_publisher_registers_every_version_under_full_transitive_and_frames_with_the_ids(
    registry_run: tuple[KafkaSettings, Path],
) -> None:
    settings, _ = registry_run
    url = settings.schema_registry_url or ""
    ids = subject_ids(url, subject(settings))
    assert sorted(ids) == [s.version for s in CATALOG.versions]
    status, level = ccompat(url, f"/config/{subject(settings)}")
    assert status == 200
    assert level["compatibilityLevel"] == "FULL_TRANSITIVE"
    # Each id is the registry's copy of one shipped version (same fingerprint).
    by_fingerprint = CATALOG.by_fingerprint()
    for version, schema_id in ids.items():
        _, held = ccompat(url, f"/schemas/ids/{schema_id}")
        fingerprint = schema_from_json(held["schema"], name="TurnEvent", version=-1).fingerprint
        assert by_fingerprint[fingerprint].version == version
    framed = Counter()
    topic = settings.topics.turn_events
    for message in read_range(settings, topic, None, end_offsets(settings, topic)):
        value = message.value()
        assert value[0] == 0  # Confluent framing: magic byte, 4-byte id, body
        framed[int.from_bytes(value[1:5], "big")] += 1
    assert sum(framed.values()) == TURNS
    assert set(framed) == set(ids.values())  # every version was written, each with its id


def test_services_count_every_turn_and_verify_is_clean_in_registry_mode(
    registry_run: tuple[KafkaSettings, Path],
) -> None:
    settings, tmp = registry_run
    log_file = tmp / "turns.jsonl"
    registry = CollectorRegistry()
    logs = log_sink_service(
        service_settings(
            settings, ServiceName.LOG_SINK, "g-reg-logs", log=LogSinkSettings(file=log_file)
        ),
        registry=CollectorRegistry(),
    )
    metrics = verdict_metrics_service(
        service_settings(settings, ServiceName.VERDICT_METRICS, "g-reg-metrics"),
        registry=registry,
    )
    end = end_offsets(settings, settings.topics.turn_events)
    with service_logging(), running(logs), running(metrics):
        assert wait_for(consumed_everything(logs, end))
        assert wait_for(consumed_everything(metrics, end))
        for service in (logs, metrics):
            assert service.http_port is not None
            samples = scrape(service.http_port)
            assert total(samples, "turnaudit_dead_letters_total") == 0
            assert total(samples, "turnaudit_schema_registry_retries_total") == 0
            # v5 chains bind the fingerprint the id resolves to: no break in any stream.
            assert total(samples, "turnaudit_chain_breaks_total") == 0
        port = metrics.http_port
        assert port is not None
        assert wait_for(lambda: total(scrape(port), "turnaudit_turns_total") == TURNS)
        # verify, a real process of its own: every turn on the stream, chained (v5 binds
        # the fingerprint of the schema each id resolves to), logged once and counted.
        ran = run_turnaudit(
            "verify",
            "--json",
            "--log-file",
            str(log_file),
            "--metrics-url",
            f"http://127.0.0.1:{port}/metrics",
            env=registry_env(settings),
            timeout=300,
        )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
    report = json.loads(ran.stdout)
    assert report["unexplained"] == []
    assert report["counts"]["turns"] == TURNS
    truth = json.loads((tmp / "truth.json").read_text())
    assert report["counts"]["refused"] == sum(truth["refused_by_pack"].values())
    assert report["counts"]["by_schema_version"] == truth["by_schema_version"]
    assert report["streams"]["chained"] > 0  # v3 and later streams, v5 ones binding the id's
    assert report["lost"] == report["uncounted"] == report["not_logged"] == 0
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert len({line["event_id"] for line in lines}) == TURNS


def test_replay_tail_and_the_reading_api_resolve_the_ids_from_the_registry(
    registry_run: tuple[KafkaSettings, Path],
) -> None:
    settings, tmp = registry_run
    env = registry_env(settings)
    out = tmp / "replayed.jsonl"
    ran = run_turnaudit("replay", "--into", f"jsonl:{out}", env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr
    replayed = [json.loads(line) for line in out.read_text().splitlines()]
    replayed_ids = {line["event"]["event_id"] for line in replayed}
    assert len(replayed_ids) == TURNS
    assert {line["writer_version"] for line in replayed} == {s.version for s in CATALOG.versions}
    tailed = run_turnaudit(
        "tail", "--from", "2000-01-01T00:00:00Z", "--limit", str(TURNS), env=env, timeout=300
    )
    assert tailed.returncode == 0, tailed.stderr
    assert len(tailed.stdout.splitlines()) == TURNS
    turns = list(read_turn_events(settings))
    assert [t.error for t in turns if t.error is not None] == []
    assert {t.event["event_id"] for t in turns if t.event is not None} == replayed_ids
    assert Counter(t.writer_version for t in turns).keys() == {s.version for s in CATALOG.versions}


def test_a_schema_the_subject_refuses_stops_the_publisher_in_one_line_naming_the_subject(
    kafka_settings: KafkaSettings, schema_registry: LocalSchemaRegistry, tmp_path: Path
) -> None:
    settings = replace(kafka_settings, schema_registry_url=schema_registry.url)
    # The subject already holds a TurnEvent no shipped version can be read by: a field
    # without a default that none of them writes (under FULL_TRANSITIVE, set beforehand).
    foreign = json.loads(CATALOG.version(1).schema_json)
    foreign["fields"].append({"name": "tenant", "type": "string"})
    url = schema_registry.url
    assert (
        ccompat(url, f"/config/{subject(settings)}", {"compatibility": "FULL_TRANSITIVE"}, "PUT")[0]
        == 200
    )
    status, _ = ccompat(
        url, f"/subjects/{subject(settings)}/versions", {"schema": json.dumps(foreign)}
    )
    assert status == 200
    ran = run_turnaudit(
        "simulate",
        "--events",
        "20",
        "--spool-dir",
        str(tmp_path / "spool"),
        env=registry_env(settings),
        timeout=120,
    )
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode == 1
    assert len(lines) == 1, ran.stderr
    assert f"under subject {subject(settings)}" in lines[0]
    assert "incompatible" in lines[0]
    assert "409" in lines[0]  # the registry's own refusal, in its words
    assert "RuleViolationException: Incompatible artifact" in lines[0]
    # Nothing was published, and nothing waits in a spool to go out unframed later.
    topic = settings.topics.turn_events
    assert sum(end_offsets(settings, topic).values()) == 0
    assert not any((tmp_path / "spool").rglob("*.spool"))
    assert sorted(subject_ids(url, subject(settings))) == [1]  # the registry kept its own


def test_without_auto_registration_the_publisher_only_looks_up_what_was_registered(
    kafka_settings: KafkaSettings, schema_registry: LocalSchemaRegistry, tmp_path: Path
) -> None:
    settings = replace(
        kafka_settings,
        schema_registry_url=schema_registry.url,
        schema_registry_auto_register=False,
    )
    url, name = schema_registry.url, subject(settings)
    # Nobody registered them yet: one line naming the version and the subject, nothing
    # written to the registry.
    with pytest.raises(RegistryUnavailableError) as raised:
        TurnEventPublisher(settings, spool_dir=tmp_path / "spool-1")
    assert f"did not find TurnEvent v1 under {name}" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert ccompat(url, f"/subjects/{name}/versions")[0] == 404
    # Registered beforehand (by a pipeline with write rights, here a publisher that may),
    # then a level of the operator's own: the looking-up publisher changes neither.
    TurnEventPublisher(
        replace(settings, schema_registry_auto_register=True), spool_dir=tmp_path / "spool-2"
    ).close()
    assert ccompat(url, f"/config/{name}", {"compatibility": "FULL"}, "PUT")[0] == 200
    before = subject_ids(url, name)
    publisher = TurnEventPublisher(settings, spool_dir=tmp_path / "spool-3")
    (event,) = TurnRuntimeSimulator(1, schema_versions=(5,)).events(1)
    publisher.publish(event)
    assert publisher.close(timeout=30).delivered == 1
    assert subject_ids(url, name) == before
    assert ccompat(url, f"/config/{name}")[1]["compatibilityLevel"] == "FULL"
    topic = settings.topics.turn_events
    (message,) = read_range(settings, topic, None, end_offsets(settings, topic))
    assert int.from_bytes(message.value()[1:5], "big") == before[5]


def test_the_htir_feeder_and_the_continuous_verifier_read_registry_mode_as_processes(
    registry_run: tuple[KafkaSettings, Path],
) -> None:
    settings, tmp = registry_run
    registry = {"TURNAUDIT_SCHEMA_REGISTRY_URL": settings.schema_registry_url or ""}
    feeder_env = service_env(settings, "g-reg-feeder", **registry)
    follow_env = service_env(settings, "g-reg-follow", **registry)
    feeder_port, follow_port = (int(e["TURNAUDIT_HTTP_PORT"]) for e in (feeder_env, follow_env))

    def figure(port: int, name: str, **labels: str) -> int:
        try:
            return total(scrape(port), name, **labels)
        except OSError:
            return 0  # not listening yet

    with (
        turnaudit_process(["htir", "feed", "--idle-timeout", "1"], feeder_env, tmp / "feeder.log"),
        turnaudit_process(["verify", "--follow", "--grace", "2"], follow_env, tmp / "follow.log"),
    ):
        assert wait_for(
            lambda: (
                figure(feeder_port, "turnaudit_consumer_messages_total", outcome="accepted")
                == TURNS
            ),
            timeout=120,
        )
        assert wait_for(
            lambda: figure(follow_port, "turnaudit_verify_turns_proved_total") == TURNS,
            timeout=120,
        )
        assert figure(feeder_port, "turnaudit_dead_letters_total") == 0
        assert figure(feeder_port, "turnaudit_chain_breaks_total") == 0
        assert figure(follow_port, "turnaudit_verify_chain_breaks_total") == 0
        assert figure(follow_port, "turnaudit_verify_undecodable_total") == 0


def test_apicurios_ways_content_ids_no_global_level_and_a_final_not_found(
    registry_run: tuple[KafkaSettings, Path], kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings, _ = registry_run
    url = settings.schema_registry_url or ""
    # Ids are content ids: the same schemas under another subject have the same ids.
    other = replace(fresh_topics(kafka_bootstrap), schema_registry_url=url)
    TurnEventPublisher(other, spool_dir=tmp_path / "spool").close()
    assert subject_ids(url, subject(other)) == subject_ids(url, subject(settings))
    # The global default is NONE (Confluent's is BACKWARD): the publisher sets the
    # subject's own level, so nothing rests on it.
    assert ccompat(url, "/config")[1]["compatibilityLevel"] == "NONE"
    # An id the registry does not hold is "not found" at once: no retry, no backoff.
    unknown = 1 + max(subject_ids(url, subject(settings)).values()) + 10_000
    decode = decoder_for(settings, schemas_topic=False)
    value = b"\x00" + unknown.to_bytes(4, "big") + b"\x02"
    with pytest.raises(SchemaNotFoundError, match=f"schema id {unknown} not found"):
        decode(value)
    assert decode.registry_retries == 0


@pytest.mark.parametrize("version", [s.version for s in CATALOG.versions])
def test_every_version_round_trips_through_the_registry(
    schema_registry: LocalSchemaRegistry, version: int
) -> None:
    registry = registry_client(schema_registry.url)
    topic = f"round-trip-{version}.turn-events"
    serialize = ConfluentSerializer(CATALOG.version(version), registry).bind(topic)
    decode = TurnEventDeserializer(CATALOG, registry=registry)
    records = list(TurnRuntimeSimulator(5, schema_versions=(version,)).events(20))
    for n, record in enumerate(records):
        record["event_id"], record["sequence"] = f"e{n}", n
        payload = serialize(record)
        assert payload[0] == 0
        decoded = decode(payload)
        assert decoded.framing is Framing.CONFLUENT
        assert decoded.writer_version == version
        assert decoded.writer_fingerprint == f"registry:{int.from_bytes(payload[1:5], 'big')}"
        assert decode.writer_fingerprint(decoded) == CATALOG.version(version).fingerprint
        assert decoded.event["verdicts"] == record["verdicts"]
        assert decoded.event["occurred_at"] == record["occurred_at"]
    assert ccompat(schema_registry.url, f"/config/{topic}-value")[1] == {
        "compatibilityLevel": "FULL_TRANSITIVE"
    }
