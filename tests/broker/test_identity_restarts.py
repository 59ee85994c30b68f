"""Turn identity on the real broker: restarted, interleaved and spool-draining publisher
processes; a reorder and a late arrival; a consumer SIGKILLed and restarted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.support import PROJECT_ROOT
from tests.support.identity_streams import Stamped, stamped_events
from tests.support.jsonl import complete_json_lines
from tests.support.publish_part import SESSIONS
from tests.support.services import assigned, service_env, service_process
from tests.support.streams import (
    consumed_everything,
    produce_raw,
    running,
    scrape,
    service_settings,
    total,
    wait_for,
)
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.local_broker import free_port
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.run import run_verify

pytestmark = pytest.mark.broker

PROJECT = PROJECT_ROOT
DECODE = TurnEventDeserializer(shipped_catalog())


def one_stream(n: int) -> list[Stamped]:
    """The first ``n`` turns of one session's stream."""
    by_key: dict[bytes, list[Stamped]] = {}
    for m in stamped_events(60, seed=8, sessions=2):
        by_key.setdefault(m.key, []).append(m)
    return next(ms[:n] for ms in by_key.values() if len(ms) >= n)


def publisher_process(
    settings: KafkaSettings, spool: Path, *args: int, bootstrap: str | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.publish_part",
            bootstrap or settings.bootstrap_servers or "",
            settings.topics.prefix,
            str(spool),
            *map(str, args),
        ],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def finished(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_restarted_interleaved_and_spool_draining_publishers_lose_and_miscount_nothing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    seed, count = 23, 700
    truth = TurnRuntimeSimulator(seed, schema_versions=(3,), concurrent_sessions=SESSIONS)
    list(truth.events(count))
    registry = CollectorRegistry()
    service = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, "g-identity"),
        registry=registry,
    )
    with running(service):
        assert wait_for(service.assigned_once.is_set)
        # A runtime, then the same runtime restarted: the same sessions continue.
        first = finished(publisher_process(kafka_settings, tmp_path / "a", seed, count, 0, 200))
        # Two replicas serving the same sessions at once, turn by turn.
        pair = [
            publisher_process(kafka_settings, tmp_path / f"b{k}", seed, count, 200, 500, 2, k)
            for k in (0, 1)
        ]
        replicas = [finished(p) for p in pair]
        # A runtime that cannot reach the broker spools; the next process drains it.
        dead = f"127.0.0.1:{free_port()}"
        spooling = finished(
            publisher_process(kafka_settings, tmp_path / "c", seed, count, 500, 600, bootstrap=dead)
        )
        draining = finished(
            publisher_process(kafka_settings, tmp_path / "c", seed, count, 600, 700)
        )
        assert spooling["undelivered"] == 100  # really left in the spool
        assert draining["undelivered"] == 0
        producers = {first["producer_id"], spooling["producer_id"], draining["producer_id"]}
        producers |= {r["producer_id"] for r in replicas}
        assert len(producers) == 5
        end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
        assert wait_for(consumed_everything(service, end))
        port = service.http_port
        assert port is not None
        samples = scrape(port)
        report = run_verify(
            kafka_settings,
            DECODE,
            RangeSpec(),
            metrics_urls=[f"http://127.0.0.1:{port}/metrics"],
        )
    j = report.as_json()
    assert j["verdict"] == "ok", j["unexplained"]
    assert (j["lost"], j["uncounted"]) == (0, 0)
    assert j["counts"]["turns"] == truth.truth.events == count
    assert total(samples, "turnaudit_turns_total") == j["counts"]["turns"]
    assert total(samples, "turnaudit_refused_turns_total") == j["counts"]["refused"]
    assert total(samples, "turnaudit_refused_turns_total") == truth.truth.refused
    assert total(samples, "turnaudit_hedged_turns_total") == truth.truth.hedged
    assert total(samples, "turnaudit_new_turns_total") == count
    assert total(samples, "turnaudit_redelivered_turns_total") == 0
    assert total(samples, "turnaudit_stream_missing_turns") == 0
    assert total(samples, "turnaudit_chain_breaks_total") == 0
    # The same sessions were written by several producers: one stream each.
    streams = report.verifier.tracker.last_positions()
    sessions = {s for s, _ in streams}
    assert len(streams) > len(sessions)
    assert j["streams"]["total"] == len(streams)


def test_a_reorder_raises_the_missing_figure_and_the_late_turn_brings_it_back(
    kafka_settings: KafkaSettings,
) -> None:
    events = one_stream(6)
    registry = CollectorRegistry()
    service = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, "g-late"), registry=registry
    )
    topic = kafka_settings.topics.turn_events
    with running(service):
        port = service.http_port
        assert port is not None
        produce_raw(kafka_settings, [(events[i].key, events[i].value) for i in (0, 1, 3, 4)])
        assert wait_for(lambda: total(scrape(port), "turnaudit_new_turns_total") == 4)
        up = scrape(port)
        produce_raw(kafka_settings, [(events[i].key, events[i].value) for i in (2, 5)])
        assert wait_for(lambda: total(scrape(port), "turnaudit_new_turns_total") == 6)
        assert wait_for(consumed_everything(service, end_offsets(kafka_settings, topic)))
        down = scrape(port)
    assert total(up, "turnaudit_stream_missing_turns") == 1
    assert total(up, "turnaudit_sequence_missing_turns_total") == 1
    assert total(down, "turnaudit_stream_missing_turns") == 0
    assert total(down, "turnaudit_stream_gaps_closed_total") == 1
    assert total(down, "turnaudit_turns_total") == 6
    assert total(down, "turnaudit_chain_breaks_total") == 0


def test_a_wrong_key_is_flagged_and_counted_not_dead_lettered(
    kafka_settings: KafkaSettings,
) -> None:
    events = one_stream(2)
    registry = CollectorRegistry()
    service = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, "g-key"), registry=registry
    )
    with running(service):
        port = service.http_port
        assert port is not None
        produce_raw(
            kafka_settings, [(events[0].key, events[0].value), (b"someone-else", events[1].value)]
        )
        assert wait_for(lambda: total(scrape(port), "turnaudit_key_mismatches_total") == 1)
        samples = scrape(port)
    assert total(samples, "turnaudit_dead_letters_total") == 0
    assert total(samples, "turnaudit_contract_breaches_total", contract="key_is_session_id") == 1
    assert total(samples, "turnaudit_turns_total") == 2  # the turn happened: counted
    report = run_verify(kafka_settings, DECODE, RangeSpec())
    j = report.as_json()
    assert j["dead_letters"]["count"] == 0
    assert [f["kind"] for f in j["unexplained"]] == ["key_mismatch"]


def test_redeliveries_after_a_consumer_sigkill_are_redeliveries_not_new_turns(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    turns_file = tmp_path / "turns.jsonl"
    env = service_env(
        kafka_settings,
        "g-kill-id",
        TURNAUDIT_LOG_FILE=str(turns_file),
        TURNAUDIT_BATCH_SIZE="20",
        TURNAUDIT_GROUP_INSTANCE_ID="logs-1",
    )
    publisher = threading.Thread(
        target=lambda: finished(
            publisher_process(kafka_settings, tmp_path / "p", 31, 3000, 0, 1500)
        ),
    )
    with service_process("logs", env, tmp_path / "first.log") as first:
        publisher.start()  # killed while it consumes a stream still being written
        assert wait_for(lambda: len(complete_json_lines(turns_file)) >= 300)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    killed_at = len(complete_json_lines(turns_file))
    publisher.join()
    # The runtime goes on while the service is down: the restarted service has
    # work left whenever the kill landed.
    finished(publisher_process(kafka_settings, tmp_path / "p2", 31, 3000, 1500, 3000))
    with service_process("logs", env, tmp_path / "second.log") as second:
        assert wait_for(lambda: assigned(env))  # running, its signal handlers installed
        assert wait_for(
            lambda: len({ln["event_id"] for ln in complete_json_lines(turns_file)}) >= 3000
        )
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0
    lines = complete_json_lines(turns_file)
    assert killed_at < 3000
    report = run_verify(kafka_settings, DECODE, RangeSpec(), log_file=turns_file).as_json()
    assert report["verdict"] == "ok", report["unexplained"]
    assert report["counts"]["turns"] == 3000
    # Every line beyond the first per event id is a redelivery, never a turn of its own.
    assert report["log_sink"]["repeated_lines"] == len(lines) - 3000
    assert report["log_sink"]["distinct_event_ids"] == 3000
