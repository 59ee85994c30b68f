"""A service as N worker processes in its consumer group (``--workers``), on the real broker.

A worker really killed (SIGKILL) and a member added while the stream is
being written: every event counted at least once on the service's one
``/metrics``, the re-read ones marked as redeliveries, nothing lost; SIGTERM
drains every worker and the group's committed offsets cover the topic.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.forked_cli import forked_turnaudit
from tests.support.jsonl import complete_json_lines
from tests.support.streams import (
    scrape,
    total,
)
from turnaudit.local_broker import free_port
from turnaudit.settings import KafkaSettings

PARTITIONS = 6


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


def written(folder: Path) -> list[str]:
    """Event ids of the complete lines in the workers' files."""
    return [
        line["event_id"]
        for path in sorted(folder.glob("turns.worker-*.jsonl"))
        for line in complete_json_lines(path)
    ]


MIRROR_SCRIPT = """
import sys
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from turnaudit.consumers.runtime.worker_metrics import MirroringRegistry

class Figures:
    def __init__(self):
        self.value = 0
    def collect(self):
        yield CounterMetricFamily("kept_turns", "kept by the process", value=self.value)

registry = MirroringRegistry()
figures = Figures()
registry.register(figures)
missing = Gauge("missing", "read at scrape time", registry=registry, multiprocess_mode="livesum")
missing.set_function(lambda: figures.value * 2)
plain = Counter("plain", "file-backed already", registry=registry)
plain.inc(5)
for value in (3, 7, 7, 11):
    figures.value = value
    registry.mirror()
merged = CollectorRegistry()
MultiProcessCollector(merged)
for family in merged.collect():
    for sample in family.samples:
        print(sample.name, sample.value)
"""


def test_mirroring_registry_puts_callback_figures_into_the_multiprocess_files(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", MIRROR_SCRIPT],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    values = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    # The counter by its increases (3, 4, 0, 4), the gauge as last read, the
    # file-backed counter once (not mirrored again).
    assert float(values["kept_turns_total"]) == 11
    assert float(values["missing"]) == 22
    assert float(values["plain_total"]) == 5


MARKING_SCRIPT = """
import sys
from turnaudit.consumers.runtime.sink import BatchingSink, ConsumedTurn
from turnaudit.consumers.runtime.redelivery import RedeliveryMarkingSink
from turnaudit.identity import TrackResult, TurnOutcome

class Kept(BatchingSink):
    def __init__(self):
        super().__init__()
        self.turns = []
    def write_batch(self, turns):
        self.turns.extend(turns)

def turns(partition, offsets):
    placement = TrackResult(TurnOutcome.NEW, ("s", "p"), 0)
    return [ConsumedTurn(None, placement, "t", partition, o) for o in offsets]

kept = Kept()
sink = RedeliveryMarkingSink(kept, "t", sys.argv[1])
other = RedeliveryMarkingSink(Kept(), "t", sys.argv[1])  # another worker's delivery
marked = []
sink.on_marked = marked.append
for batch in sys.argv[2:]:
    if batch == "revoke-0":
        sink.partitions_revoked({0})
        continue
    writer = other if batch.startswith("other:") else sink
    partition, first, last = map(int, batch.removeprefix("other:").split(":"))
    for turn in turns(partition, range(first, last)):
        writer.take(turn)
    writer.flush()
print(sum(marked), ",".join(f"{t.partition}:{t.offset}" for t in kept.turns
                            if t.sequence.redelivered))
"""


def run_marking(folder: Path, *batches: str) -> tuple[int, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", MARKING_SCRIPT, str(folder), *batches],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    count, _, positions = result.stdout.strip().partition(" ")
    return int(count), positions.split(",") if positions else []


def test_turns_another_worker_delivered_are_marked_redelivered(tmp_path: Path) -> None:
    # Worker A hands partition 0 up to offset 10, partition 1 up to 5, then dies.
    assert run_marking(tmp_path, "0:0:10", "1:0:5") == (0, [])
    # Its successor reads from the committed offsets (0:6, 1:5): only what A had is marked.
    marked, positions = run_marking(tmp_path, "0:6:12", "1:5:8")
    assert (marked, positions) == (4, ["0:6", "0:7", "0:8", "0:9"])
    # A worker that had the partition, lost it and gets it back at the offset
    # it left (another worker read further meanwhile, then died) looks again.
    marked, positions = run_marking(tmp_path, "0:20:25", "other:0:25:30", "revoke-0", "0:25:32")
    assert (marked, positions) == (5, ["0:25", "0:26", "0:27", "0:28", "0:29"])


def test_a_metrics_file_still_being_created_does_not_stop_the_marking(tmp_path: Path) -> None:
    """A worker starting at the same moment has created its metrics file and not yet
    sized it: the others read past it (it holds no delivered offset yet)."""
    assert run_marking(tmp_path, "0:0:10") == (0, [])
    for empty in ("gauge_max_999999.db", "counter_999998.db"):
        (tmp_path / empty).write_bytes(b"")
    (tmp_path / "gauge_max_999997.db").write_bytes(b"\x01\x00")  # cut short
    marked, positions = run_marking(tmp_path, "0:6:12")
    assert (marked, positions) == (4, ["0:6", "0:7", "0:8", "0:9"])


def test_the_log_sink_needs_a_file_per_worker(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TURNAUDIT_HTTP_PORT": str(free_port()),
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    }
    result = forked_turnaudit("sink", "logs", "--workers", "2", env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "TURNAUDIT_LOG_FILE" in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--workers", "0"], {}, "is not a positive number"),
        (["--workers", "two"], {}, "is not a whole number"),
        (["--workers", "65"], {}, "is above 64"),
        ([], {"TURNAUDIT_WORKERS": "0"}, "TURNAUDIT_WORKERS=0 is below 1"),
        ([], {"TURNAUDIT_WORKERS": "x"}, "TURNAUDIT_WORKERS='x' is not a whole number"),
        ([], {"TURNAUDIT_WORKERS": "65"}, "TURNAUDIT_WORKERS=65 is above 64"),
    ],
)
@pytest.mark.parametrize("command", [["sink", "metrics"], ["sink", "logs"], ["htir", "feed"]])
def test_a_wrong_worker_count_gets_one_line(
    command: list[str], args: list[str], env: dict[str, str], expected: str
) -> None:
    full_env = {
        "PATH": os.environ.get("PATH", ""),
        "TURNAUDIT_HTTP_PORT": str(free_port()),
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        **env,
    }
    result = forked_turnaudit(*command, *args, env=full_env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert expected in result.stderr
