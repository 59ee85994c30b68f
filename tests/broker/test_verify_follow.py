"""``turnaudit verify --follow`` on the real broker: tampering by an outside producer
raises the right ``turnaudit_verify_*`` counter; SIGKILL and restart resume from the
checkpoint (reading again no more than the uncheckpointed tail) and the checkpointed
counts equal a one-shot ``verify`` of the same range."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.support.services import TURNAUDIT
from tests.support.streams import http_get, wait_for
from tests.support.verify_helpers import fresh_topics, publish
from turnaudit.cli import main
from turnaudit.consumers.runtime.settings import ServiceName, default_group_id
from turnaudit.errors import BrokerError
from turnaudit.identity import TurnStamper
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.state_topic import read_state
from turnaudit.local_broker import free_port
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

ENCODE_V3 = SingleObjectSerializer(shipped_catalog().version(3))
KINDS = ("removed", "inserted", "swapped", "edited")


@contextmanager
def follower(
    settings: KafkaSettings,
    port: int,
    log: Path,
    *args: str,
    log_level: str = "WARNING",
    checkpoint_s: float = 1.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """``verify --follow --grace 2`` (and ``args``) as a process of its own, checkpointing
    every ``checkpoint_s``."""
    env = {
        "TURNAUDIT_VERIFY_CHECKPOINT_S": str(checkpoint_s),
        "TURNAUDIT_LOG_LEVEL": log_level,
        "PATH": os.environ.get("PATH", ""),
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_HTTP_PORT": str(port),
    }
    with log.open("ab") as stderr:
        proc = subprocess.Popen(
            [TURNAUDIT, "verify", "--follow", "--grace", "2", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)


def scrape(port: int) -> dict[str, float]:
    code, body = http_get(port, "/metrics")
    assert code == 200
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name.startswith("turnaudit_verify_") or sample.name.startswith(
                "turnaudit_consumer_messages"
            ):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = (
                    found.get(f"{sample.name}{{{labels}}}", 0) + sample.value
                )
    return found


def checkpoint(settings: KafkaSettings) -> dict[int, dict[str, Any]]:
    latest: dict[bytes, bytes | None] = dict(read_state(settings))
    return {
        int(k.decode().split(":")[1]): json.loads(v)
        for k, v in latest.items()
        if k.startswith(b"partition:") and v is not None
    }


def checkpoint_totals(settings: KafkaSettings) -> dict[str, int]:
    """The follower's checkpointed counts, summed over its partitions."""
    totals: dict[str, int] = {}
    for proof in checkpoint(settings).values():
        for name, n in proof["counts"].items():
            if isinstance(n, int):
                totals[name] = totals.get(name, 0) + n
    return totals


def one_shot_verify(
    settings: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    exit_code: int,
) -> dict[str, Any]:
    """``verify --json`` over the same topic, in process: its report."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    capsys.readouterr()
    assert main(["verify", "--json"]) == exit_code
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def caught_up(settings: KafkaSettings) -> bool:
    high = watermarks(settings, settings.topics.turn_events).high
    try:
        proved = checkpoint(settings)
    except BrokerError:  # the follower has not created its state topic yet
        return False
    return all(proved.get(p, {}).get("offset", 0) >= h for p, h in high.items() if h)


def tampered_streams(settings: KafkaSettings) -> None:
    """Four sessions from an outside producer, each tampered with once."""
    producer = Producer(settings.client_config())
    sim = TurnRuntimeSimulator(99, schema_versions=(3,), concurrent_sessions=1)
    for kind in KINDS:
        stamper = TurnStamper()
        rows = []
        for n, event in enumerate(sim.events(6)):
            event["session_id"] = f"tamper-{kind}"
            stamper.stamp(event)
            value = ENCODE_V3(event)
            stamper.commit(event, value)
            rows.append((event, value))
            if n == 2 and kind == "edited":
                rows[-1] = (event, ENCODE_V3({**event, "turn": event["turn"] + 1}))
        values = [v for _, v in rows]
        if kind == "removed":
            del values[2]
        elif kind == "inserted":
            values.insert(3, ENCODE_V3({**rows[2][0], "event_id": "forged-" + kind}))
        elif kind == "swapped":
            values[2], values[3] = values[3], values[2]
        for value in values:
            producer.produce(settings.topics.turn_events, value, f"tamper-{kind}".encode())
    assert producer.flush(30) == 0


def test_follow_finds_tampering_resumes_after_sigkill_and_agrees_with_one_shot_verify(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = fresh_topics(kafka_bootstrap)
    port = free_port()
    publish(settings, tmp_path / "a", seed=31, events=400)
    with follower(settings, port, tmp_path / "follow.log") as proc:
        assert wait_for(lambda: caught_up(settings), timeout=90)
        tampered_streams(settings)
        assert wait_for(lambda: caught_up(settings), timeout=60)
        assert wait_for(
            lambda: scrape(port)["turnaudit_verify_lost_turns_total{cause=gap}"] >= 1, timeout=30
        )
        first = scrape(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert first["turnaudit_verify_lost_turns_total{cause=gap}"] == 1
    assert first["turnaudit_verify_lost_turns_total{cause=crash}"] == 0  # closed cleanly
    assert first["turnaudit_verify_chain_breaks_total{kind=position_reused}"] == 1
    assert first["turnaudit_verify_chain_breaks_total{kind=chain}"] == 1
    assert first["turnaudit_verify_late_turns_total{}"] == 1
    at_kill = checkpoint(settings)

    # More turns while it is down; the restarted follower resumes from its checkpoint.
    publish(settings, tmp_path / "b", seed=32, events=200)
    with follower(settings, port, tmp_path / "follow.log"):
        assert wait_for(lambda: caught_up(settings), timeout=90)
        after = scrape(port)
    reread = after["turnaudit_verify_reread_messages_total{}"]
    proved_again = after["turnaudit_verify_turns_proved_total{}"]
    print(
        f"\nrestart after SIGKILL: {proved_again:.0f} turns proved, {reread:.0f} messages "
        "read again below the checkpoint"
    )
    assert proved_again == 200
    high_at_kill = sum(p["offset"] for p in at_kill.values())
    assert reread <= high_at_kill  # never more than the uncheckpointed tail (here: ~0)
    assert after["turnaudit_verify_lost_turns_total{cause=gap}"] == 0  # nothing new lost

    # The checkpointed counts against a one-shot verify of the same range.
    totals = checkpoint_totals(settings)
    report = one_shot_verify(settings, monkeypatch, capsys, exit_code=1)
    kinds = report["unexplained_by_kind"]
    assert totals["proved"] == report["counts"]["turns"]
    assert totals["lost"] == report["lost"] == 1
    assert totals["late"] == kinds["late_arrival"] == 1
    assert totals["chain"] == kinds["chain_break"] == 1
    assert totals["position_reused"] == kinds["position_reused"] == 1
    assert totals["duplicates"] == report["duplicates"]["count"]


def committed_offsets(settings: KafkaSettings, group: str) -> dict[int, int]:
    """The group's committed offsets on turn-events (partitions with none left out)."""
    consumer = Consumer({**settings.client_config(), "group.id": group})
    try:
        topic = settings.topics.turn_events
        wanted = [TopicPartition(topic, p) for p in range(settings.partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(wanted, 30) if tp.offset >= 0}
    finally:
        consumer.close()


def answering(port: int) -> bool:
    try:
        return http_get(port, "/metrics")[0] == 200
    except OSError:  # not listening yet
        return False


def proved_turns(port: int) -> float:
    """Turns the follower proved so far (0 before its /metrics answers)."""
    try:
        return scrape(port).get("turnaudit_verify_turns_proved_total{}", 0.0)
    except OSError:  # not listening yet (urllib's URLError is an OSError)
        return 0.0


def test_offsets_never_pass_the_checkpoint_so_a_kill_between_checkpoints_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Between two checkpoints the proof is ahead of what is durable: the offsets the
    follower commits stay at or below the last durable checkpoint, so a SIGKILL then makes
    the restart read those turns again (proved, none lost), never skip them."""
    settings = fresh_topics(kafka_bootstrap)
    port = free_port()
    publish(settings, tmp_path / "a", seed=33, events=300)
    group = default_group_id(settings.topics.prefix, ServiceName.VERIFY_FOLLOW)
    with follower(settings, port, tmp_path / "follow.log", checkpoint_s=3600) as proc:
        assert wait_for(lambda: proved_turns(port) >= 300, timeout=90)
        time.sleep(3)  # librdkafka commits stored offsets every second: give it three
        committed = committed_offsets(settings, group)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    durable = {p: proof["offset"] for p, proof in checkpoint(settings).items()}
    assert sum(durable.values()) < 300  # the proof was ahead of its checkpoint at the kill
    for p, offset in committed.items():
        assert offset <= durable.get(p, 0), (committed, durable)  # never past it
    with follower(settings, port, tmp_path / "follow.log", checkpoint_s=0.5):
        assert wait_for(lambda: caught_up(settings), timeout=90)
        after = scrape(port)
    # Past the checkpoint: proved again; between the commit and the checkpoint: re-read.
    assert after["turnaudit_verify_turns_proved_total{}"] == 300 - sum(durable.values())
    reread = sum(durable.values()) - sum(committed.get(p, 0) for p in durable)
    assert after["turnaudit_verify_reread_messages_total{}"] == reread
    assert after["turnaudit_verify_lost_turns_total{cause=gap}"] == 0


def test_a_restart_that_reads_no_new_turn_still_takes_its_partitions_over_and_sweeps_their_gaps(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A follower restarted where every offset is committed reads no message of its
    partitions, yet holds them from their checkpoints at once: a gap a killed run opened
    (its turn removed) is declared lost once past the grace, with no turn arriving."""
    settings = fresh_topics(kafka_bootstrap)
    port = free_port()
    publish(settings, tmp_path / "a", seed=34, events=100)
    tampered_streams(settings)  # the "removed" session opens a gap
    group = default_group_id(settings.topics.prefix, ServiceName.VERIFY_FOLLOW)
    high = watermarks(settings, settings.topics.turn_events).high
    log = tmp_path / "follow.log"
    with follower(settings, port, log, "--grace", "600", checkpoint_s=0.2) as proc:
        assert wait_for(lambda: caught_up(settings), timeout=90)
        assert wait_for(
            lambda: committed_offsets(settings, group) == {p: h for p, h in high.items() if h},
            timeout=30,
        )
        first = scrape(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert first["turnaudit_verify_lost_turns_total{cause=gap}"] == 0  # within its grace
    with follower(settings, port, log, checkpoint_s=0.2):  # --grace 2
        assert wait_for(lambda: answering(port), timeout=90)
        assert wait_for(lambda: checkpoint_totals(settings)["lost"] == 1, timeout=60)
        after = scrape(port)
    assert after["turnaudit_verify_lost_turns_total{cause=gap}"] == 1
    assert after["turnaudit_verify_turns_proved_total{}"] == 0  # no message read
