"""A service as N worker processes in its consumer group (``--workers``), on the real broker.

A worker really killed (SIGKILL) and a member added while the stream is
being written: every event counted at least once on the service's one
``/metrics``, the re-read ones marked as redeliveries, nothing lost; SIGTERM
drains every worker and the group's committed offsets cover the topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.jsonl import complete_json_lines
from tests.support.services import service_env, turnaudit_process
from tests.support.streams import (
    http_get,
    publish_simulated,
    published_traces,
    scrape,
    task_steps_on_stream,
    total,
    wait_for,
)
from turnaudit.consumers.runtime.redelivery import DELIVERED_OFFSET
from turnaudit.evaluation import review_pack
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.simulator import PACKS
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

PARTITIONS = 6


@pytest.fixture
def six_partitions(kafka_bootstrap: str) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topics=TopicNames(f"t-{uuid.uuid4().hex[:10]}."),
        partitions=PARTITIONS,
    )
    ensure_topics(settings)
    return settings


def workers_process(
    service: str, workers: int, env: dict[str, str], log: Path, *, command: Sequence[str] = ()
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """``turnaudit sink SERVICE --workers N``, or ``command`` with ``--workers N``."""
    argv = [*command] if command else ["sink", service]
    return turnaudit_process(["--log-level", "INFO", *argv, "--workers", str(workers)], env, log)


def health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        code, body = http_get(port, "/healthz")
    except OSError:
        return 0, {}
    return code, json.loads(body)


def settled(port: int, workers: int) -> bool:
    """Every partition held, by every one of ``workers`` workers, none twice."""
    states = health(port)[1].get("worker_states", [])
    held = [p for s in states for p in s.get("assigned_partitions", [])]
    return (
        len(states) == workers
        and all(s.get("assigned_partitions") for s in states)
        and sorted(held) == list(range(PARTITIONS))
    )


def worker_pids(port: int) -> dict[int, int | None]:
    _, body = health(port)
    return {w["worker"]: w["pid"] for w in body.get("worker_states", [])}


def delivered_by(port: int, worker: int) -> bool:
    """Whether ``worker`` has handed a batch of one of its partitions to its sink (the
    service's delivered offset of that partition is past its start)."""
    states = health(port)[1].get("worker_states", [])
    mine = {
        p for s in states if s.get("worker") == worker for p in s.get("assigned_partitions", [])
    }
    try:
        samples = scrape(port)
    except OSError:
        return False
    return any(total(samples, DELIVERED_OFFSET, partition=str(p)) > 0 for p in mine)


def counted(port: int, **labels: str) -> int:
    try:
        return total(scrape(port), "turnaudit_turns_total", **labels)
    except OSError:
        return 0


def committed(settings: KafkaSettings, group: str) -> dict[int, int]:
    consumer = Consumer(settings.client_config(**{"group.id": group}))
    try:
        offsets = consumer.committed(
            [TopicPartition(settings.topics.turn_events, p) for p in range(PARTITIONS)],
            timeout=10,
        )
    finally:
        consumer.close()
    return {tp.partition: max(tp.offset, 0) for tp in offsets}


def test_a_worker_killed_and_one_added_mid_stream_lose_nothing_and_flag_redeliveries(
    six_partitions: KafkaSettings, tmp_path: Path
) -> None:
    settings = six_partitions
    env = service_env(
        settings,
        "g-workers",
        TURNAUDIT_METRICS_PACKS=",".join(PACKS),
        TURNAUDIT_BATCH_SIZE="50",
        # Offsets committed on rebalances and at the drain only: the killed
        # worker surely leaves consumed, uncommitted messages to be read again.
        TURNAUDIT_KAFKA_OPTIONS=json.dumps({"auto.commit.interval.ms": "60000"}),
    )
    port = int(env["TURNAUDIT_HTTP_PORT"])
    truths = []
    publisher = threading.Thread(
        # About 4 s of stream: the kill below surely lands while it is written.
        target=lambda: truths.append(
            publish_simulated(settings, 12000, tmp_path / "spool", rate=3000)
        ),
    )
    with workers_process("metrics", 2, env, tmp_path / "workers.log") as service:
        # Both workers are members with partitions of their own.
        assert wait_for(lambda: settled(port, 2), timeout=90)
        publisher.start()
        assert wait_for(lambda: counted(port) >= 1500)
        # The victim has handed turns to its sink (their marks are on record): the kill
        # leaves turns delivered and not committed, whoever of the two was faster.
        assert wait_for(lambda: delivered_by(port, 0), timeout=30)
        victim = worker_pids(port)[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)  # mid-stream, with consumed offsets not committed
        killed_at = counted(port)
        service.send_signal(signal.SIGTTIN)  # and one worker more, while the stream runs
        publisher.join(120)
        truth = truths[0]
        assert wait_for(lambda: counted(port) >= truth.events, timeout=120)
        # The killed worker is back under its own member name; the added one holds partitions.
        assert wait_for(lambda: settled(port, 3), timeout=90)
        assert worker_pids(port)[0] not in (None, victim)
        samples = scrape(port)
        service.send_signal(signal.SIGTERM)
        assert service.wait(90) == 0
    assert killed_at < truth.events  # it really was killed mid-stream
    log = (tmp_path / "workers.log").read_text()
    assert "worker_exited" in log
    assert "killed by SIGKILL" in log
    assert "worker_added" in log
    assert total(samples, "turnaudit_worker_restarts_total", worker="0") == 1
    assert total(samples, "turnaudit_workers") == 3
    # Every event counted at least once, in every pack: nothing lost.
    turns = total(samples, "turnaudit_turns_total")
    assert turns >= truth.events
    # Figures the workers keep themselves reach the one /metrics too (mirrored
    # every second; test_mirroring_registry checks the figures).
    assert total(samples, "turnaudit_new_turns_total") > 0
    for pack in PACKS:
        assert total(samples, "turnaudit_turns_total", pack=pack) >= truth.by_pack[pack]
        assert (
            total(samples, "turnaudit_refused_turns_total", pack=pack)
            >= (truth.refused_by_pack[pack])
        )
    # The killed worker's uncommitted messages were read again by its successor,
    # marked as redeliveries and not counted again: the count is exact unless the
    # kill fell between a batch's write and its mark (one batch at most).
    redelivered = total(samples, "turnaudit_redelivered_turns_total")
    print(f"\nturns counted {turns} of {truth.events}; redeliveries flagged {redelivered}")
    assert redelivered > 0
    assert turns - truth.events <= 50
    # The drain committed everything the group read.
    assert committed(settings, "g-workers") == end_offsets(settings, settings.topics.turn_events)


def test_sigterm_drains_every_worker_and_commits_exactly_what_they_wrote(
    six_partitions: KafkaSettings, tmp_path: Path
) -> None:
    settings = six_partitions
    turns_file = tmp_path / "turns.jsonl"
    env = service_env(
        settings, "g-drain", TURNAUDIT_BATCH_SIZE="100", TURNAUDIT_LOG_FILE=str(turns_file)
    )
    port = int(env["TURNAUDIT_HTTP_PORT"])
    publisher = threading.Thread(  # about 10 s of stream, so the stop falls inside it
        target=publish_simulated,
        args=(settings, 10000, tmp_path / "spool"),
        kwargs={"rate": 1000},
    )
    with workers_process("logs", 3, env, tmp_path / "drain.log") as service:
        assert wait_for(lambda: settled(port, 3), timeout=90)
        pids = worker_pids(port)
        publisher.start()
        # Stopped while the stream is still being written and read.
        assert wait_for(lambda: len(written(tmp_path)) >= 1000)
        service.send_signal(signal.SIGTERM)
        assert service.wait(90) == 0
    publisher.join(120)
    log = (tmp_path / "drain.log").read_text()
    assert log.count('"consumer_stopped"') == 3, log
    assert '"clean": true' in log
    for pid in pids.values():
        assert pid is not None
        assert not Path(f"/proc/{pid}").exists()
    # One file per worker; together exactly the messages below the committed offsets.
    assert sorted(p.name for p in tmp_path.glob("turns.worker-*.jsonl")) == [
        f"turns.worker-{i}.jsonl" for i in range(3)
    ]
    done = committed(settings, "g-drain")
    end = end_offsets(settings, settings.topics.turn_events)
    assert sum(done.values()) < sum(end.values())  # stopped mid-stream
    below = event_ids_below(settings, done)
    assert set(written(tmp_path)) == below
    assert len(written(tmp_path)) == len(below)  # and each once


def test_feeder_workers_publish_each_trace_whole_through_a_kill_and_an_added_worker(
    six_partitions: KafkaSettings, tmp_path: Path
) -> None:
    """``htir feed --workers 2``: one worker really killed and one added while the
    stream is written. Every task's trace is published with all of its turns on
    the stream, never in part; each worker appends to a manifest of its own."""
    settings = six_partitions
    env = service_env(
        settings,
        "g-feed",
        TURNAUDIT_BATCH_SIZE="50",
        TURNAUDIT_KAFKA_OPTIONS=json.dumps({"auto.commit.interval.ms": "60000"}),
    )
    port = int(env["TURNAUDIT_HTTP_PORT"])
    manifest = tmp_path / "manifest.jsonl"
    feed = ["htir", "feed", "--idle-timeout", "3", "--manifest", str(manifest)]
    publisher = threading.Thread(  # about 4 s of stream
        target=publish_simulated,
        args=(settings, 8000, tmp_path / "spool"),
        kwargs={"seed": 43, "rate": 2000},
    )

    def traces_published() -> int:
        try:
            return total(scrape(port), "turnaudit_htir_traces_total")
        except OSError:
            return 0

    with workers_process("", 2, env, tmp_path / "feed.log", command=feed) as service:
        assert wait_for(lambda: settled(port, 2), timeout=90)
        publisher.start()
        assert wait_for(lambda: traces_published() >= 5, timeout=90)
        victim = worker_pids(port)[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)  # with open traces and uncommitted offsets
        mid_stream = publisher.is_alive()
        service.send_signal(signal.SIGTTIN)  # and a third worker, while the stream runs
        publisher.join(120)
        expected = task_steps_on_stream(settings)

        def every_task_published() -> bool:
            return {t.task_id for t in published_traces(settings)} >= set(expected)

        assert wait_for(every_task_published, timeout=120)
        assert wait_for(lambda: settled(port, 3), timeout=90)
        service.send_signal(signal.SIGTERM)
        assert service.wait(90) == 0
    assert mid_stream  # it really was killed while the stream was written
    log = (tmp_path / "feed.log").read_text()
    assert "killed by SIGKILL" in log
    assert "worker_added" in log
    traces = published_traces(settings)
    for trace in traces:
        turns = [s["task_step"] for s in trace.steps if s["kind"] == "turn"]
        assert turns == expected[trace.task_id], trace.task_id
    # One manifest per worker; each task in them, a task republished after the
    # kill possibly twice (the killed worker's and its successor's), never more.
    files = sorted(tmp_path.glob("manifest.worker-*.jsonl"))
    assert [f.name for f in files] == [f"manifest.worker-{i}.jsonl" for i in range(3)]
    written = Counter(
        json.loads(line)["task_id"] for f in files for line in f.read_text().splitlines()
    )
    assert set(written) == set(expected)
    assert max(written.values()) <= 2
    # The workers' manifests go to review as they are: each task one case.
    pack = review_pack.export([(None, f) for f in files], tmp_path / "pack.json")
    assert sorted(case["task_id"] for case in pack["cases"]) == sorted(expected)


def written(folder: Path) -> list[str]:
    """Event ids of the complete lines in the workers' files."""
    return [
        line["event_id"]
        for path in sorted(folder.glob("turns.worker-*.jsonl"))
        for line in complete_json_lines(path)
    ]


def event_ids_below(settings: KafkaSettings, offsets: dict[int, int]) -> set[str]:
    decode = TurnEventDeserializer(shipped_catalog())
    return {
        decode(m.value()).event["event_id"]
        for m in read_range(settings, settings.topics.turn_events, None, offsets)
    }


def test_workers_of_a_killed_supervisor_drain_and_leave(
    six_partitions: KafkaSettings, tmp_path: Path
) -> None:
    env = service_env(six_partitions, "g-orphans")
    port = int(env["TURNAUDIT_HTTP_PORT"])
    with workers_process("metrics", 2, env, tmp_path / "orphans.log") as service:
        assert wait_for(lambda: settled(port, 2), timeout=90)
        pids = [pid for pid in worker_pids(port).values() if pid is not None]
        service.send_signal(signal.SIGKILL)
        service.wait(30)
    assert len(pids) == 2
    # Nothing would ever stop them otherwise.
    assert wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), timeout=60)
    log = (tmp_path / "orphans.log").read_text()
    assert log.count('"worker_orphaned"') == 2
    assert log.count('"consumer_stopped"') == 2
