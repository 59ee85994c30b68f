"""Three KRaft nodes on loopback: the leader, a follower or two nodes SIGKILLed mid-publish.

Topics get replication factor 3 and min.insync.replicas 2 by default; the
publisher writes with acks=all. While the simulator publishes and the log sink
consumes, the leader of partition 0 of turn-events is killed, then restarted:
``verify`` must find 0 lost and no turn counted twice, the sink must keep
consuming (the longest pause it saw is measured and printed), and the node
must rejoin the cluster. With two of three nodes down, acks=all cannot be met:
the publisher's unacknowledged turns go to its spool after its age bound and
drain when the nodes return, still 0 lost and none twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
RATE = 2000  # turns/s asked of the simulator
TURNS = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    with running(cluster_settings(tmp_path_factory.mktemp("three-nodes"), nodes=3)) as broker:
        yield broker


def leader_and_replicas(broker: LocalKafkaBroker, topic: str) -> tuple[int, list[int]]:
    """Partition 0's leader and replicas, once the metadata a node answers with has them (a
    topic just created may be named by a node before its partitions are)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    deadline = time.monotonic() + 30
    while True:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if 0 in partitions and partitions[0].leader >= 0:
            return partitions[0].leader, list(partitions[0].replicas)
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} has no partition 0 with a leader after 30 s")
        time.sleep(0.2)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@dataclass(frozen=True)
class Outage:
    """Which nodes go down mid-publish, and for how long."""

    name: str
    victims: Callable[[int, list[int]], list[int]]  # (leader, replicas) -> nodes to kill
    down_s: float


OUTAGES = [
    # The leader: a follower takes over, the publisher retries on the new leader.
    Outage("leader", lambda leader, replicas: [leader], 3.0),
    # A follower: the ISR shrinks to two, acks=all still met.
    Outage("follower", lambda leader, replicas: [next(r for r in replicas if r != leader)], 3.0),
    # Both followers: no controller quorum and fewer than min.insync.replicas,
    # so acks=all cannot be met; turns unacknowledged past the publisher's age
    # bound go to the spool and drain when the nodes return.
    Outage("two nodes", lambda leader, replicas: [r for r in replicas if r != leader], 8.0),
]


@pytest.mark.parametrize("outage", OUTAGES, ids=[o.name for o in OUTAGES])
def test_nodes_killed_mid_publish_lose_nothing(
    cluster: LocalKafkaBroker, tmp_path: Path, outage: Outage
) -> None:
    prefix = f"{PREFIX}{outage.name.replace(' ', '-')}."  # each scenario its own topics
    topic = f"{prefix}turn-events"
    wait_all_serving(cluster)
    assert topic in ensure_topics(admin_settings(cluster, prefix))
    leader, replicas = leader_and_replicas(cluster, topic)
    assert len(replicas) == 3
    victims = outage.victims(leader, replicas)
    log_file = tmp_path / "turns.jsonl"
    sink_env = principal_env(
        cluster, "", prefix, TURNAUDIT_HTTP_PORT=str(free_port()), TURNAUDIT_LOG_FILE=str(log_file)
    )
    sim_env = principal_env(cluster, "", prefix, TURNAUDIT_MAX_UNACKED_S="2")
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
                # Two nodes back and the partition's leadership settled can take more than
                # close()'s default 30 s on a loaded machine: nothing is lost meanwhile.
                "--close-timeout",
                "120",
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
                for node in victims:
                    cluster.kill_node(node)
                killed_at = now
            if killed_at is not None and restarted_at is None and now - killed_at > outage.down_s:
                for node in victims:
                    cluster.start_node(node)
                restarted_at = time.monotonic() - started
            if now > 180:
                break
            time.sleep(0.05)
        out, err = publisher.communicate(timeout=120)
        assert publisher.returncode == 0, out + err
        assert killed_at is not None
        if restarted_at is None:
            for node in victims:
                cluster.start_node(node)
        # The sink's longest stall after the kill, while turns were still to come.
        pause = longest_stall(samples, since=killed_at, until_count=TURNS)
        assert lines(log_file) >= TURNS
        verified = subprocess.run(
            [sys.executable, "-m", "turnaudit.cli", "verify", "--log-file", str(log_file)],
            env=principal_env(cluster, "", prefix),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert reconciled(verified.stdout, verified.returncode), verified.stdout + verified.stderr
    assert "lost 0," in verified.stdout
    assert f"turns {TURNS} " in verified.stdout  # no turn counted twice
    for node in victims:
        assert cluster.node_status(node).serving  # the killed nodes rejoined
    new_leader, _ = leader_and_replicas(cluster, topic)
    assert new_leader in cluster.node_ids
    moved = sum(
        int(json.loads(line)["events"])
        for line in (out + err).splitlines()
        if '"unacknowledged_events_to_spool"' in line
    )
    print(
        f"\n{outage.name}: nodes {victims} killed at {killed_at:.1f} s for {outage.down_s:.0f} s; "
        f"sink's longest pause {pause:.2f} s; {moved} turns moved to the spool for age; "
        f"{RATE} turns/s x {TURNS}"
    )


def wait_all_serving(cluster: LocalKafkaBroker, timeout: float = 90.0) -> None:
    """Each scenario starts from a whole cluster (the previous one restarted its nodes)."""
    deadline = time.monotonic() + timeout
    while not all(cluster.node_status(n).serving for n in cluster.node_ids):
        assert time.monotonic() < deadline, "the cluster did not come back whole"
        time.sleep(0.5)


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
