"""``turnaudit sink otel`` against a real OpenTelemetry Collector (deploy/otelcol/) and broker.

Simulated turns of every schema version are published; the service exports each
turn's verdicts as ``gen_ai.evaluation.result`` log records; the collector
writes what it received to a file. Every turn on the topic must be there, each
verdict once at least, under the span the runtime had, through a SIGKILL of the
service (restarted as itself) and of one of its worker processes (restarted by
its supervisor, the re-read turns flagged ``turnaudit.redelivered``) and an
outage of the collector (the failed flushes retried until it is back), over
OTLP/gRPC and OTLP/HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.otelcol import Collector, LogRecord, running_collector
from tests.support.services import assigned, service_env, service_process, turnaudit_process
from tests.support.streams import http_get, publish_simulated, scrape, total, wait_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.local_broker import free_ports
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

EVENT_NAME = "gen_ai.evaluation.result"
GENAI_NAMES = (
    "gen_ai.evaluation.name",
    "gen_ai.evaluation.score.value",
    "gen_ai.evaluation.score.label",
)


def events_on_topic(settings: KafkaSettings) -> dict[str, dict[str, Any]]:
    """Every turn on the topic by event id, decoded as a subscriber would."""
    decode = TurnEventDeserializer(shipped_catalog())
    end = end_offsets(settings, settings.topics.turn_events)
    events = {}
    for message in read_range(settings, settings.topics.turn_events, None, end):
        event = decode(message.value()).event
        events[event["event_id"]] = event
    return events


def verdict_names(event: dict[str, Any]) -> set[str]:
    """The evaluations a turn has, from its verdicts (independently of the sink's mapping)."""
    bundle = event["verdicts"]
    names = {"refusal", "hedge"}
    names |= {"safety"} if bundle["safety_verdict"] is not None else set()
    names |= {"ethics"} if bundle["ethics_verdict"] is not None else set()
    names |= {"action_risk"} if event.get("action_assessment") is not None else set()
    return names


def by_event(records: list[LogRecord]) -> dict[str, list[LogRecord]]:
    grouped: dict[str, list[LogRecord]] = defaultdict(list)
    for record in records:
        grouped[str(record.attributes.get("turnaudit.event_id"))].append(record)
    return grouped


def every_turn_exported(
    collector: Collector, events: dict[str, dict[str, Any]], among: set[str] | None = None
) -> Callable[[], bool]:
    """Every verdict of every turn (of ``among``, or all) written by the collector: a
    turn's records may span two export requests, and the file is flushed every second."""
    wanted = {
        (event_id, name)
        for event_id, event in events.items()
        if among is None or event_id in among
        for name in verdict_names(event)
    }

    def done() -> bool:
        seen = {
            (
                str(r.attributes.get("turnaudit.event_id")),
                str(r.attributes.get("gen_ai.evaluation.name")),
            )
            for r in collector.records()
        }
        return seen >= wanted

    return done


def check_records(events: dict[str, dict[str, Any]], records: list[LogRecord]) -> None:
    """Every turn's verdicts present at least once, each record as the runtime's turn says."""
    grouped = by_event(records)
    assert set(grouped) == set(events)  # nothing lost, nothing from elsewhere
    for event_id, event in events.items():
        copies = grouped[event_id]
        names = {str(r.attributes["gen_ai.evaluation.name"]) for r in copies}
        assert names == verdict_names(event), event_id
        context = event.get("trace_context")
        model = event.get("model")
        for record in copies:
            assert record.event_name == EVENT_NAME
            assert all(name in record.attributes for name in GENAI_NAMES)
            assert record.attributes["turnaudit.pack_id"] == event["pack_id"]
            assert record.attributes["turnaudit.session_id"] == event["session_id"]
            assert record.resource["service.name"] == "turnaudit-otel-sink"
            if context is not None:  # the span the runtime had, exactly
                assert (record.trace_id, record.span_id) == (
                    context["trace_id"],
                    context["span_id"],
                )
            else:
                assert record.trace_id == ""
            if model is not None:
                assert record.attributes["gen_ai.request.model"] == model["request_model"]
                assert record.attributes["gen_ai.provider.name"] == model["provider"]
                assert record.attributes["gen_ai.response.id"] == event["response_id"]
    # The simulator's v4 turns all carry a span: the run covers parented records.
    assert any(e.get("trace_context") for e in events.values())


def without_delivery_marks(record: LogRecord) -> str:
    kept = {k: v for k, v in record.attributes.items() if k != "turnaudit.redelivered"}
    return json.dumps([record.trace_id, record.span_id, kept], sort_keys=True)


def test_sigkill_and_restart_of_the_service_over_http_loses_no_turn(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    with running_collector(tmp_path) as collector:
        env = service_env(
            kafka_settings,
            "g-otel-kill",
            TURNAUDIT_OTLP_PROTOCOL="http",
            TURNAUDIT_OTLP_ENDPOINT=collector.http_endpoint,
            TURNAUDIT_BATCH_SIZE="20",
            TURNAUDIT_GROUP_INSTANCE_ID="otel-1",  # the restart takes its partitions back at once
        )
        publisher = threading.Thread(
            target=publish_simulated, args=(kafka_settings, 1500, tmp_path / "spool")
        )
        with service_process("otel", env, tmp_path / "first.log") as first:
            assert wait_for(lambda: bool(assigned(env)))
            publisher.start()  # killed while it consumes a stream still being written
            assert wait_for(lambda: len(by_event(collector.records())) >= 200)
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        publisher.join()
        killed_at = len(by_event(collector.records()))
        # More turns while it is down: the restarted service has work left whenever
        # the kill landed.
        publish_simulated(kafka_settings, 1000, tmp_path / "spool-2", seed=8)
        events = events_on_topic(kafka_settings)
        assert len(events) == 2500
        with service_process("otel", env, tmp_path / "second.log") as second:
            assert wait_for(lambda: bool(assigned(env)))
            assert wait_for(every_turn_exported(collector, events), timeout=120)
            second.send_signal(signal.SIGTERM)
            assert second.wait(60) == 0
        records = collector.records()
    assert killed_at < len(events)  # it really was killed mid-stream
    check_records(events, records)
    # A turn exported twice (read again after the kill) is the same record twice.
    copies: dict[tuple[str, str], set[str]] = defaultdict(set)
    for record in records:
        key = (
            str(record.attributes["turnaudit.event_id"]),
            str(record.attributes["gen_ai.evaluation.name"]),
        )
        copies[key].add(without_delivery_marks(record))
    assert all(len(kinds) == 1 for kinds in copies.values())


def worker_pids(port: int) -> dict[int, int | None]:
    try:
        code, body = http_get(port, "/healthz")
    except OSError:
        return {}
    if code != 200:
        return {}
    return {w["worker"]: w["pid"] for w in json.loads(body).get("worker_states", [])}


def workers_hold_partitions(port: int, workers: int) -> bool:
    try:
        _, body = http_get(port, "/healthz")
    except OSError:
        return False
    states = json.loads(body).get("worker_states", [])
    return len(states) == workers and all(s.get("assigned_partitions") for s in states)


TURNS = 4000


def test_a_killed_worker_over_grpc_loses_no_turn_and_its_reread_turns_are_flagged(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    with running_collector(tmp_path) as collector:
        env = service_env(
            kafka_settings,
            "g-otel-workers",
            TURNAUDIT_OTLP_PROTOCOL="grpc",
            TURNAUDIT_OTLP_ENDPOINT=collector.grpc_endpoint,
            TURNAUDIT_BATCH_SIZE="50",
            # Offsets committed on rebalances and at the drain only: the killed worker
            # surely leaves exported, uncommitted turns to be read again.
            TURNAUDIT_KAFKA_OPTIONS=json.dumps({"auto.commit.interval.ms": "60000"}),
        )
        port = int(env["TURNAUDIT_HTTP_PORT"])
        # Paced (5 s of turns), so the kill, once 500 are exported, lands mid-stream on any
        # machine: unpaced, a fast one exported all 8,000 before the kill.
        publisher = threading.Thread(
            target=publish_simulated,
            args=(kafka_settings, TURNS, tmp_path / "spool"),
            kwargs={"rate": TURNS // 5},
        )
        argv = ["--log-level", "INFO", "sink", "otel", "--workers", "2"]
        with turnaudit_process(argv, env, tmp_path / "workers.log") as service:
            assert wait_for(lambda: workers_hold_partitions(port, 2), timeout=90)
            publisher.start()
            assert wait_for(lambda: len(by_event(collector.records())) >= 500)
            victim = worker_pids(port)[0]
            assert victim is not None
            os.kill(victim, signal.SIGKILL)  # mid-stream, with exported offsets not committed
            killed_at = len(by_event(collector.records()))
            publisher.join(120)
            events = events_on_topic(kafka_settings)
            assert len(events) == TURNS
            assert wait_for(every_turn_exported(collector, events), timeout=120)
            assert wait_for(lambda: worker_pids(port).get(0) not in (None, victim))
            service.send_signal(signal.SIGTERM)
            assert service.wait(90) == 0
        records = collector.records()
    assert killed_at < len(events)
    assert "killed by SIGKILL" in (tmp_path / "workers.log").read_text()
    check_records(events, records)
    flagged = [r for r in records if r.attributes["turnaudit.redelivered"] is True]
    print(f"\nrecords {len(records)} for {len(events)} turns; flagged redelivered {len(flagged)}")
    assert flagged  # the successor re-read the killed worker's uncommitted turns
    # A flag is never false news: a flagged turn was exported before, unflagged.
    first_copies = {
        (str(r.attributes["turnaudit.event_id"]), str(r.attributes["gen_ai.evaluation.name"]))
        for r in records
        if r.attributes["turnaudit.redelivered"] is False
    }
    for record in flagged:
        assert (
            str(record.attributes["turnaudit.event_id"]),
            str(record.attributes["gen_ai.evaluation.name"]),
        ) in first_copies


def test_a_collector_outage_holds_the_turns_until_it_is_back(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    ports = tuple(free_ports(2))
    env = service_env(
        kafka_settings,
        "g-otel-outage",
        TURNAUDIT_OTLP_PROTOCOL="grpc",
        TURNAUDIT_OTLP_ENDPOINT=f"http://127.0.0.1:{ports[0]}",
        TURNAUDIT_OTLP_TIMEOUT_MS="1000",
        TURNAUDIT_BATCH_SIZE="50",
    )
    port = int(env["TURNAUDIT_HTTP_PORT"])

    def export_failures() -> float:
        try:
            return total(scrape(port), "turnaudit_otel_export_failures_total")
        except OSError:
            return 0.0

    with service_process("otel", env, tmp_path / "service.log") as service:
        with running_collector(tmp_path, ports=(ports[0], ports[1]), name="before") as before:
            assert wait_for(lambda: bool(assigned(env)))
            publish_simulated(kafka_settings, 300, tmp_path / "spool")
            first = events_on_topic(kafka_settings)
            assert wait_for(every_turn_exported(before, first))
            exported_before = set(by_event(before.records()))
        # The collector is away: these turns' exports fail, their flushes are retried.
        publish_simulated(kafka_settings, 500, tmp_path / "spool-2", seed=9)
        events = events_on_topic(kafka_settings)
        during = set(events) - set(first)
        assert wait_for(lambda: export_failures() >= 2)
        with running_collector(tmp_path, ports=(ports[0], ports[1]), name="after") as after:
            assert wait_for(every_turn_exported(after, events, during), timeout=120)
            service.send_signal(signal.SIGTERM)
            assert service.wait(60) == 0
            records = after.records()
    assert exported_before == set(first)
    # Every turn published during the outage reached the collector once it was back.
    check_records(
        {k: v for k, v in events.items() if k in during},
        [r for r in records if r.attributes["turnaudit.event_id"] in during],
    )
    assert "sink_write_failed" in (tmp_path / "service.log").read_text()
