"""The services as real processes: SIGKILL and restart, SIGTERM drain, two in one group."""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.jsonl import complete_json_lines
from tests.support.services import assigned, service_env, service_process
from tests.support.streams import publish_simulated, scrape, total, wait_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.simulator import PACKS
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def event_ids_on_topic(settings: KafkaSettings) -> set[str]:
    decode = TurnEventDeserializer(shipped_catalog())
    end = end_offsets(settings, settings.topics.turn_events)
    return {
        decode(m.value()).event["event_id"]
        for m in read_range(settings, settings.topics.turn_events, None, end)
    }


def test_sigkill_mid_stream_then_restart_loses_nothing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    turns_file = tmp_path / "turns.jsonl"
    # Static membership: the restarted instance takes the partitions back at once.
    env = service_env(
        kafka_settings,
        "g-kill",
        TURNAUDIT_LOG_FILE=str(turns_file),
        TURNAUDIT_BATCH_SIZE="20",
        TURNAUDIT_GROUP_INSTANCE_ID="logs-1",
    )
    publisher = threading.Thread(
        target=publish_simulated,
        args=(kafka_settings, 2000, tmp_path / "spool"),
    )
    with service_process("logs", env, tmp_path / "first.log") as first:
        assert wait_for(lambda: bool(assigned(env)))
        publisher.start()  # killed while it consumes a stream still being written
        assert wait_for(lambda: len(complete_json_lines(turns_file)) >= 300)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    killed_at = len(complete_json_lines(turns_file))
    publisher.join()
    # More turns while the service is down: the restarted one has work left
    # whenever the kill landed.
    publish_simulated(kafka_settings, 2000, tmp_path / "spool-2", seed=8)
    expected = event_ids_on_topic(kafka_settings)
    assert len(expected) == 4000
    with service_process("logs", env, tmp_path / "second.log") as second:
        assert wait_for(lambda: bool(assigned(env)))  # running, its signal handlers installed
        assert wait_for(
            lambda: {line["event_id"] for line in complete_json_lines(turns_file)} >= expected
        )
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0
    lines = complete_json_lines(turns_file)
    assert killed_at < 4000  # it really was killed mid-stream
    assert {line["event_id"] for line in lines} == expected
    # A duplicate is a redelivery of the same message: same id, same offset, same content.
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        by_id[line["event_id"]].append(
            {k: v for k, v in line.items() if k not in ("timestamp", "redelivered")}
        )
    for copies in by_id.values():
        assert all(copy == copies[0] for copy in copies)


def test_sigterm_drains_and_commits_what_the_sink_has(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    env = service_env(kafka_settings, "g-term")
    port = int(env["TURNAUDIT_HTTP_PORT"])
    truth = publish_simulated(kafka_settings, 1500, tmp_path / "spool")
    with service_process("metrics", env, tmp_path / "metrics.log") as proc:
        assert wait_for(
            lambda: (
                bool(assigned(env)) and total(scrape(port), "turnaudit_turns_total") == truth.events
            )
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    consumer = Consumer(kafka_settings.client_config(**{"group.id": "g-term"}))
    committed = consumer.committed(
        [TopicPartition(kafka_settings.topics.turn_events, p) for p in end], timeout=10
    )
    consumer.close()
    assert {tp.partition: max(tp.offset, 0) for tp in committed} == end


def test_two_instances_in_one_group_split_the_partitions_and_count_every_event_once(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    extra = {"TURNAUDIT_METRICS_PACKS": ",".join(PACKS)}
    envs = [service_env(kafka_settings, "g-pair", **extra) for _ in range(2)]
    with (
        service_process("metrics", envs[0], tmp_path / "a.log"),
        service_process("metrics", envs[1], tmp_path / "b.log"),
    ):
        # Both members settled: the partitions split between them, none twice.
        assert wait_for(
            lambda: (
                sorted(assigned(envs[0]) + assigned(envs[1])) == [0, 1, 2]
                and all(assigned(e) for e in envs)
            )
        )
        split = [assigned(e) for e in envs]
        truth = publish_simulated(kafka_settings, 3000, tmp_path / "spool", seed=5)
        ports = [int(e["TURNAUDIT_HTTP_PORT"]) for e in envs]
        assert wait_for(
            lambda: sum(total(scrape(p), "turnaudit_turns_total") for p in ports) >= truth.events
        )
        samples = [scrape(p) for p in ports]
    assert set(split[0]).isdisjoint(split[1])
    assert all(total(s, "turnaudit_turns_total") > 0 for s in samples)
    assert sum(total(s, "turnaudit_turns_total") for s in samples) == truth.events
    for pack in PACKS:
        assert (
            sum(total(s, "turnaudit_turns_total", pack=pack) for s in samples)
            == truth.by_pack[pack]
        )
        assert (
            sum(total(s, "turnaudit_refused_turns_total", pack=pack) for s in samples)
            == truth.refused_by_pack[pack]
        )


def test_a_sigkilled_service_restarted_as_itself_gets_its_partitions_back_within_seconds(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    # No instance id set: the default (service, host, HTTP port) names the
    # instance, so the restart rejoins as the same static member.
    env = service_env(kafka_settings, "g-static")
    port = int(env["TURNAUDIT_HTTP_PORT"])
    with service_process("metrics", env, tmp_path / "first.log") as first:
        assert wait_for(lambda: assigned(env) == [0, 1, 2])
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    truth = publish_simulated(kafka_settings, 1000, tmp_path / "spool")  # while it is down
    restarted = time.monotonic()
    with service_process("metrics", env, tmp_path / "second.log") as second:
        assert wait_for(lambda: assigned(env) == [0, 1, 2], timeout=60)
        back_after = time.monotonic() - restarted
        assert wait_for(lambda: total(scrape(port), "turnaudit_turns_total") >= truth.events)
        counted = total(scrape(port), "turnaudit_turns_total")
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0
    print(
        f"\npartitions back {back_after:.1f} s after the restart "
        "(a dynamic member would wait out the 45 s session of the killed one)"
    )
    # Nothing lost: everything published while it was down is counted, once.
    assert counted == truth.events
    # Well inside the session timeout the killed member's partitions would otherwise wait.
    assert back_after < 45 / 2
