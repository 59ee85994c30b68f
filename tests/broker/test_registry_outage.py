"""The real schema registry stopped and restarted in the middle of a registry-mode run
behaves as docs/wire-format.md promises:

* a running publisher never asks the registry on a turn's path (its ids were registered
  when it was built): every turn goes out framed, none is spooled for want of an id;
* a publisher built while the registry is down refuses to start, before any turn, and
  leaves nothing in its spool that it could not frame;
* a service that resolved the ids goes on reading from its cache;
* a service that starts while the registry is down retries each id with the bounded
  backoff (counted in ``turnaudit_schema_registry_retries_total``), then parks the message
  as ``unknown_schema``; once the registry is back (same database, same ids) it reads the
  rest, ``turnaudit dlq redrive`` brings the parked turns back, and verify finds every
  turn logged once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import islice
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.cli import run_turnaudit
from tests.support.events import turn
from tests.support.registry import local_registry_settings, subject_ids
from tests.support.services import service_env, service_process
from tests.support.streams import (
    consumed_everything,
    running,
    scrape,
    service_settings,
    total,
    wait_for,
)
from turnaudit.consumers.log_sink import service_logging
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.errors import RegistryUnavailableError, SchemaNotFoundError
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.schema_registry import READER_OPTIONS, registry_client
from turnaudit.local_registry import LocalSchemaRegistry
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import (
    REGISTRY_RETRY_BACKOFF_S,
    ConfluentIdSerializer,
    TurnEventDeserializer,
)
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

CATALOG = shipped_catalog()
BEFORE, DURING = 200, 300  # turns published before the registry stops, and while it is down


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[LocalSchemaRegistry]:
    """A registry of this test's own: it is stopped and started again."""
    registry = LocalSchemaRegistry(local_registry_settings(tmp_path / "registry"))
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()


def publish(publisher: TurnEventPublisher, events: Iterable[dict[str, object]]) -> None:
    for event in events:
        publisher.publish(event)  # type: ignore[arg-type]  # the simulator's events


def env_of(settings: KafkaSettings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNAUDIT_")}
    return env | {
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
        "TURNAUDIT_SCHEMA_REGISTRY_URL": settings.schema_registry_url or "",
    }


def test_a_registry_stopped_and_restarted_mid_run_costs_no_turn(
    kafka_settings: KafkaSettings, own_registry: LocalSchemaRegistry, tmp_path: Path
) -> None:
    settings = replace(kafka_settings, schema_registry_url=own_registry.url)
    topic, subject = settings.topics.turn_events, f"{settings.topics.turn_events}-value"
    publisher = TurnEventPublisher(settings, spool_dir=tmp_path / "spool")
    ids = subject_ids(own_registry.url, subject)
    # v5 only: the cached reader has met every id the run uses before the registry stops.
    events = iter(TurnRuntimeSimulator(40, schema_versions=(5,)).events(BEFORE + DURING))
    cached = verdict_metrics_service(
        service_settings(settings, ServiceName.VERDICT_METRICS, "g-outage-cached"),
        registry=CollectorRegistry(),
    )
    with service_logging(), running(cached):
        port = cached.http_port
        assert port is not None
        publish(publisher, islice(events, BEFORE))
        assert wait_for(lambda: publisher.stats().delivered == BEFORE)
        assert wait_for(consumed_everything(cached, end_offsets(settings, topic)))
        assert total(scrape(port), "turnaudit_turns_total") == BEFORE

        own_registry.stop()
        assert not own_registry.status().running
        publish(publisher, events)  # the registry is down: every turn still goes out framed
        report = publisher.close(timeout=60)
        assert report.ok, report
        assert report.delivered == BEFORE + DURING
        assert publisher.spooled_total == 0
        end = end_offsets(settings, topic)
        assert sum(end.values()) == BEFORE + DURING
        assert wait_for(consumed_everything(cached, end))
        samples = scrape(port)
        assert total(samples, "turnaudit_turns_total") == BEFORE + DURING
        assert total(samples, "turnaudit_dead_letters_total") == 0
        assert total(samples, "turnaudit_schema_registry_retries_total") == 0

        # A publisher built now cannot get its ids: it refuses before any turn.
        with pytest.raises(RegistryUnavailableError, match=f"under {subject}"):
            TurnEventPublisher(settings, spool_dir=tmp_path / "spool-2")
        assert not list((tmp_path / "spool-2").rglob("*.spool"))

        # A reader started now (its own process: nothing cached) retries each message's id
        # with the bounded backoff, counted, then parks it as unknown_schema.
        log_file = tmp_path / "turns.jsonl"
        env = service_env(
            settings,
            "g-outage-cold",
            TURNAUDIT_SCHEMA_REGISTRY_URL=own_registry.url,
            TURNAUDIT_LOG_FILE=str(log_file),
        )
        cold_port = int(env["TURNAUDIT_HTTP_PORT"])

        def cold_total(name: str, **labels: str) -> int:
            try:
                return total(scrape(cold_port), name, **labels)
            except OSError:
                return 0  # not listening yet

        def messages(outcome: str) -> int:
            return cold_total("turnaudit_consumer_messages_total", outcome=outcome)

        with service_process("logs", env, tmp_path / "cold.log") as cold:
            assert wait_for(lambda: cold_total("turnaudit_dead_letters_total") >= 1)
            assert cold_total("turnaudit_schema_registry_retries_total") >= len(
                REGISTRY_RETRY_BACKOFF_S
            )
            own_registry.start()  # the same database: the same ids
            assert subject_ids(own_registry.url, subject) == ids
            assert wait_for(
                lambda: messages("accepted") + messages("dead_lettered") == BEFORE + DURING,
                timeout=120,
            )
            parked = messages("dead_lettered")
            assert parked == cold_total("turnaudit_dead_letters_total", reason="unknown_schema")

            # Once the registry answers, the parked turns are redriven and read.
            redrive = run_turnaudit(
                "dlq", "redrive", "--reason", "unknown_schema", env=env_of(settings), timeout=120
            )
            assert redrive.returncode == 0, redrive.stderr
            assert wait_for(lambda: messages("redriven") == parked)
            cold.send_signal(signal.SIGTERM)
            assert cold.wait(60) == 0

    logged = [json.loads(line)["event_id"] for line in log_file.read_text().splitlines()]
    assert len(logged) == len(set(logged)) == BEFORE + DURING
    ran = run_turnaudit("verify", "--json", "--log-file", str(log_file), env=env_of(settings))
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
    assert json.loads(ran.stdout)["counts"]["turns"] == BEFORE + DURING


def test_a_hung_registry_is_a_timeout_for_the_publisher_and_the_reader_not_a_hang(
    kafka_settings: KafkaSettings, own_registry: LocalSchemaRegistry, tmp_path: Path
) -> None:
    """A registry that takes connections and never answers (its process stopped with
    SIGSTOP: the kernel still accepts): each request gives up after REQUEST_TIMEOUT_S."""
    settings = replace(kafka_settings, schema_registry_url=own_registry.url)
    TurnEventPublisher(settings, spool_dir=tmp_path / "spool-1").close()  # ids registered
    ids = subject_ids(own_registry.url, f"{settings.topics.turn_events}-value")
    message = ConfluentIdSerializer(CATALOG.version(5), ids[5])(turn("s-hung", 0, version=5))
    pid = own_registry.pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        outcome: list[BaseException | None] = []

        def build() -> None:
            try:
                TurnEventPublisher(settings, spool_dir=tmp_path / "spool-2").close()
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        builder = threading.Thread(target=build, daemon=True)
        builder.start()
        # A reader that has not met the id: the production client options, its own cache.
        slept: list[float] = []
        cold = TurnEventDeserializer(
            CATALOG,
            registry=registry_client(own_registry.url, {**READER_OPTIONS, "cache.capacity": 7}),
            sleep=slept.append,
        )
        with pytest.raises(SchemaNotFoundError, match="timed out"):
            cold(message)
        assert cold.registry_retries == len(REGISTRY_RETRY_BACKOFF_S) == len(slept)
        builder.join(240)
        assert not builder.is_alive(), "the publisher's start hangs on a hung registry"
        (raised,) = outcome
        assert isinstance(raised, RegistryUnavailableError)
        assert "timed out" in str(raised)
        assert not list((tmp_path / "spool-2").rglob("*.spool"))
    finally:
        os.kill(pid, signal.SIGCONT)
    # Answering again: the same reader resolves the id and reads the turn.
    assert cold(message).event["event_id"] == "s-hung-0"
