"""Three KRaft nodes on loopback: the partition leader SIGKILLed mid-publish.

Topics get replication factor 3 and min.insync.replicas 2 by default; the
publisher writes with acks=all. While the simulator publishes and the log sink
consumes, the leader of partition 0 of turn-events is killed, then restarted:
``verify`` must find 0 lost and no turn counted twice, the sink must keep
consuming (the longest pause it saw is measured and printed), and the node
must rejoin the cluster.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.clusters import (
    admin_settings,
    cluster_settings,
    principal_env,
    reconciled,
    running,
)
from tests.support.services import turnaudit_process
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker, free_port

pytestmark = pytest.mark.broker

PREFIX = "rep."
RATE = 400  # turns/s: enough to show the failover on two shared cores
TURNS = 2400


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    with running(cluster_settings(tmp_path_factory.mktemp("three-nodes"), nodes=3)) as broker:
        created = ensure_topics(admin_settings(broker, PREFIX))
        assert f"{PREFIX}turn-events" in created
        yield broker


def leader_and_replicas(broker: LocalKafkaBroker, topic: str) -> tuple[int, list[int]]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    return partition.leader, list(partition.replicas)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_leader_killed_mid_publish_loses_nothing(
    cluster: LocalKafkaBroker, tmp_path: Path
) -> None:
    topic = f"{PREFIX}turn-events"
    leader, replicas = leader_and_replicas(cluster, topic)
    assert len(replicas) == 3
    log_file = tmp_path / "turns.jsonl"
    sink_env = principal_env(
        cluster, "", PREFIX, TURNAUDIT_HTTP_PORT=str(free_port()), TURNAUDIT_LOG_FILE=str(log_file)
    )
    sim_env = principal_env(cluster, "", PREFIX)
    with turnaudit_process(["sink", "logs"], sink_env, tmp_path / "sink.err"):
        publisher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "turnaudit.cli",
                "simulate",
                "--seed",
                "11",
                "--events",
                str(TURNS),
                "--rate",
                str(RATE),
                "--spool-dir",
                str(tmp_path / "spool"),
            ],
            env=sim_env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        samples: list[tuple[float, int]] = []
        killed_at = restarted_at = None
        started = time.monotonic()
        while publisher.poll() is None or lines(log_file) < TURNS:
            now = time.monotonic() - started
            samples.append((now, lines(log_file)))
            if killed_at is None and samples[-1][1] > RATE:  # mid-publish
                cluster.kill_node(leader)
                killed_at = now
            if killed_at is not None and restarted_at is None and now - killed_at > 3:
                cluster.start_node(leader)
                restarted_at = time.monotonic() - started
            if now > 150:
                break
            time.sleep(0.05)
        out, err = publisher.communicate(timeout=60)
        assert publisher.returncode == 0, out + err
        assert killed_at is not None
        if restarted_at is None:
            cluster.start_node(leader)
        # The sink's longest stall after the kill, while turns were still to come.
        pause = longest_stall(samples, since=killed_at, until_count=TURNS)
        assert lines(log_file) >= TURNS
        verified = subprocess.run(
            [sys.executable, "-m", "turnaudit.cli", "verify", "--log-file", str(log_file)],
            env=principal_env(cluster, "", PREFIX),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert reconciled(verified.stdout, verified.returncode), verified.stdout + verified.stderr
    assert "lost 0," in verified.stdout
    assert f"turns {TURNS} " in verified.stdout  # no turn counted twice
    new_leader, _ = leader_and_replicas(cluster, topic)
    assert cluster.node_status(leader).serving  # the killed node rejoined
    assert new_leader in cluster.node_ids
    print(
        f"\nleader {leader} killed at {killed_at:.1f} s; sink's longest pause {pause:.2f} s; "
        f"{RATE} turns/s x {TURNS}"
    )


def longest_stall(samples: list[tuple[float, int]], *, since: float, until_count: int) -> float:
    """The longest time after ``since`` the sink's count did not grow (before it was done)."""
    longest, grew_at, last = 0.0, since, -1
    for at, count in samples:
        if count >= until_count:
            break
        if count != last:
            grew_at, last = max(at, since), count
        elif at >= since:
            longest = max(longest, at - grew_at)
    return longest
