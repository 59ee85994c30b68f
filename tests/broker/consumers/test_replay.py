"""A replay beside a live verdict-metrics service leaves its counters and group offsets alone."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from tests.support.events import encode, turn
from tests.support.streams import (
    consumed_everything,
    counter_samples,
    produce_raw,
    publish_simulated,
    running,
    service_settings,
    wait_for,
)
from tests.support.verify_helpers import DECODE
from turnaudit.cli import main
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.replay import MetricsReplayOutput
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.events import occurred_millis
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.replay import ReplayRequest, ReplayTarget, replay
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames
from turnaudit.verify.reconciliation import metric_totals

pytestmark = pytest.mark.broker


def committed(settings: KafkaSettings, group: str) -> dict[int, int]:
    topic = settings.topics.turn_events
    probe = Consumer(settings.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        probe.close()


def live_metrics_service(
    kafka_settings: KafkaSettings,
) -> tuple[str, CollectorRegistry, verdict_metrics_service]:
    """A live verdict metrics service in a group of its own: (group, registry, service)."""
    group = f"live-{uuid.uuid4().hex[:8]}"
    registry = CollectorRegistry()
    service = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, group),
        registry=registry,
        serve_http=False,
    )
    return group, registry, service


def test_live_counters_and_group_offsets_unchanged_by_a_replay(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    truth = publish_simulated(kafka_settings, 400, tmp_path / "spool", seed=5)
    group, registry, service = live_metrics_service(kafka_settings)
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with running(service):
        assert wait_for(consumed_everything(service, end))
        assert wait_for(lambda: committed(kafka_settings, group) == end)
        counters, offsets = counter_samples(registry), committed(kafka_settings, group)
        live_turns = sum(v for (name, _), v in counters.items() if name == "turnaudit_turns_total")
        assert live_turns == truth.events

        decode = decoder_for(kafka_settings)
        summary = replay(
            kafka_settings,
            decode,
            ReplayRequest(),
            ReplayTarget.file("jsonl", tmp_path / "r.jsonl"),
        )
        assert summary.events == truth.events
        replay(
            kafka_settings,
            decode,
            ReplayRequest(),
            ReplayTarget.file("metrics", tmp_path / "r.om"),
            outputs={"metrics": lambda c: MetricsReplayOutput(decode, "test", c.target.path)},
        )
        assert "turnaudit_turns_total{" in (tmp_path / "r.om").read_text(encoding="utf-8")
        time.sleep(2)  # a few more polls of the live service
        assert counter_samples(registry) == counters
        assert committed(kafka_settings, group) == offsets


# -- the window test: simulated days, every version, every output kind -----------

# Days behind today: record timestamps are the turns' occurred_at, inside retention.
DAY_3 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
DAY_2 = DAY_3 - timedelta(days=1)


def publish_days(settings: KafkaSettings, spool: Path) -> dict[tuple[str, int], int]:
    """Three simulated runtimes whose clocks cross midnight (day 1→2, day 2→3, day 3);
    v1, v2 and v3 writers. The ground truth: (session, turn) → occurred_at in millis."""
    truth: dict[tuple[str, int], int] = {}
    publisher = TurnEventPublisher(settings, spool_dir=spool)
    starts = (DAY_2 - timedelta(seconds=40), DAY_3 - timedelta(seconds=40), DAY_3)
    for seed, start in zip((31, 32, 33), starts, strict=True):
        sim = TurnRuntimeSimulator(
            seed, schema_versions=(1, 2, 3), concurrent_sessions=15, start=start
        )
        for event in sim.events(250):
            key = (event["session_id"], event["turn"])
            assert key not in truth
            truth[key] = occurred_millis(event["occurred_at"])
            publisher.publish(event)
    assert publisher.close().ok
    return truth


def test_a_one_day_window_into_every_output_holds_exactly_that_days_events(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    truth = publish_days(kafka_settings, tmp_path / "spool")
    low, high = int(DAY_2.timestamp() * 1000), int(DAY_3.timestamp() * 1000)
    in_day = {k for k, millis in truth.items() if low <= millis < high}
    assert 0 < len(in_day) < len(truth) - 250  # the window cuts both midnight crossings
    group, registry, service = live_metrics_service(kafka_settings)
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    target_topic = f"{kafka_settings.topics.prefix}replayed"
    admin = AdminClient(kafka_settings.client_config())
    admin.create_topics([NewTopic(target_topic, 3, 1)])[target_topic].result(30)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", kafka_settings.topics.prefix)
    with running(service):
        assert wait_for(consumed_everything(service, end))
        assert wait_for(lambda: committed(kafka_settings, group) == end)
        counters, offsets = counter_samples(registry), committed(kafka_settings, group)

        window = ["--time", "event", "--from", DAY_2.isoformat(), "--to", DAY_3.isoformat()]
        outputs = {
            kind: tmp_path / f"day.{kind}" for kind in ("jsonl", "logs", "metrics", "verify")
        }
        for kind, path in outputs.items():
            assert main(["replay", *window, "--into", f"{kind}:{path}"]) == 0, (
                capsys.readouterr().err
            )
        assert (
            main(
                [
                    "replay",
                    *window,
                    "--into",
                    f"topic:{target_topic}",
                    "--checkpoint",
                    str(tmp_path / "topic.ckpt"),
                ]
            )
            == 0
        )
        assert f"{len(in_day)} events" in capsys.readouterr().out

        lines = [json.loads(x) for x in outputs["jsonl"].read_text("utf-8").splitlines()]
        assert {(x["event"]["session_id"], x["event"]["turn"]) for x in lines} == in_day
        assert len(lines) == len(in_day)
        assert {x["writer_version"] for x in lines} == {1, 2, 3}

        logged = [json.loads(x) for x in outputs["logs"].read_text("utf-8").splitlines()]
        assert {(x["session_id"], x["turn"]) for x in logged} == in_day
        assert all(x["timestamp"][:10] == DAY_2.date().isoformat() for x in logged)

        totals = metric_totals(outputs["metrics"].read_text("utf-8").replace("# EOF\n", ""))
        assert totals["turns"] == len(in_day)

        report = json.loads(outputs["verify"].read_text("utf-8"))
        assert report["counts"]["turns"] == len(in_day)
        assert report["counts"]["by_schema_version"].keys() == {"1", "2", "3"}

        copied = {
            (DECODE(m.value()).event["session_id"], DECODE(m.value()).event["turn"])
            for m in read_range(
                kafka_settings, target_topic, None, end_offsets(kafka_settings, target_topic)
            )
        }
        assert copied == in_day

        time.sleep(2)  # a few more polls of the live service
        assert counter_samples(registry) == counters
        assert committed(kafka_settings, group) == offsets


@pytest.mark.parametrize("session_b_before", [1, 3])
def test_an_event_time_window_opens_no_gap_for_a_stream_that_began_before_it(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    session_b_before: int,
) -> None:
    # One partition; its first record happened in the window. Session B's first
    # turns, stored after it, happened before the window: B starts, for the
    # window, at its first turn in it, not with a gap. A turn of B lost inside
    # the window is still a gap.
    settings = replace(
        kafka_settings, topics=TopicNames(f"t-{uuid.uuid4().hex[:10]}."), partitions=1
    )
    ensure_topics(settings)
    inside = occurred_millis(DAY_2) + 60_000
    before = occurred_millis(DAY_2) - 60_000
    happened = {("s-a", 0): inside}
    happened |= {("s-b", n): before + n for n in range(session_b_before)}
    happened |= {("s-b", n): inside + n for n in range(session_b_before, 6) if n != 4}
    events = [{**turn(session, n), "occurred_at": at} for (session, n), at in happened.items()]
    produce_raw(settings, [(e["session_id"].encode(), encode(e)) for e in events])
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    window = ["--time", "event", "--from", DAY_2.isoformat(), "--to", DAY_3.isoformat()]
    main(["replay", *window, "--into", f"verify:{tmp_path / 'verify.json'}"])
    capsys.readouterr()

    report = json.loads((tmp_path / "verify.json").read_text("utf-8"))
    assert report["counts"]["turns"] == 1 + (6 - session_b_before) - 1
    assert report["lost"] == 1  # turn 4 of s-b, and nothing before its first turn in the window
    assert [f["kind"] for f in report["unexplained"]] == ["lost"]
