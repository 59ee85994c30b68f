"""``turnaudit replay`` on the real broker: bounded, isolated, deterministic, resumable,
every shipped schema version read into today's reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.support import PROJECT_ROOT
from tests.support.verify_helpers import (
    DECODE,
    Stored,
    copy_to,
    expected_lines,
    fresh_prefix,
    fresh_topics,
    publish,
    read_lines,
    stored_range,
)
from turnaudit.cli import main
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.replay import ReplayCheckpoint, ReplayRequest, ReplayTarget, replay
from turnaudit.settings import KafkaSettings
from turnaudit.verify.counts import TurnCounts
from turnaudit.verify.reconciliation import metric_totals

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def published(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[KafkaSettings, list[Stored]]:
    settings = fresh_topics(kafka_bootstrap)
    publish(settings, tmp_path_factory.mktemp("spool"), seed=23, events=600, versions=(1, 2, 3))
    return settings, stored_range(settings)


def run_replay(
    settings: KafkaSettings, out: Path, spec: RangeSpec | None = None, **kwargs: Any
) -> Any:
    return replay(
        settings,
        DECODE,
        ReplayRequest(spec or RangeSpec()),
        ReplayTarget.file("jsonl", out),
        **kwargs,
    )


def test_whole_range_holds_every_version_in_order_and_twice_the_same_bytes(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, stored = published
    first = run_replay(settings, tmp_path / "a.jsonl", batch_size=64)
    second = run_replay(settings, tmp_path / "b.jsonl", batch_size=1000)
    assert first.events == second.events == len(stored) == 600
    assert first.undecodable == 0
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    lines = read_lines(tmp_path / "a.jsonl")
    assert lines == expected_lines(stored)
    assert {line["writer_version"] for line in lines} == {1, 2, 3}
    # Today's reader: every line has the v3 fields, whatever version wrote it.
    assert all("verdicts" in line["event"] for line in lines)
    checkpoint = ReplayCheckpoint.load(tmp_path / "a.jsonl.replay-checkpoint.json")
    last = {m.partition: m.offset for m in sorted(stored, key=lambda m: m.offset)}
    assert checkpoint.complete
    assert checkpoint.end == {p: o + 1 for p, o in last.items()}


def test_offset_window_of_some_partitions_through_the_cli(
    published: tuple[KafkaSettings, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, stored = published
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    out = tmp_path / "window.jsonl"
    code = main(
        [
            "replay",
            "--from-offsets",
            "0:10,1:5,2:20",
            "--to-offsets",
            "0:60,1:70,2:90",
            "--partitions",
            "0,2",
            "--into",
            f"jsonl:{out}",
            "--batch-size",
            "7",
        ]
    )
    assert code == 0, capsys.readouterr().err
    window = [
        m
        for m in stored
        if (m.partition == 0 and 10 <= m.offset < 60) or (m.partition == 2 and 20 <= m.offset < 90)
    ]
    assert len(window) == 50 + 70
    assert read_lines(out) == expected_lines(window)
    assert "replayed 120 events" in capsys.readouterr().out


def test_time_window_holds_the_messages_stamped_in_it(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, stored = published
    stamps = sorted({m.timestamp for m in stored})
    assert len(stamps) > 3, "the publisher wrote every message in the same millisecond"
    since, until = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    spec = RangeSpec(
        datetime.fromtimestamp(since / 1000, UTC), datetime.fromtimestamp(until / 1000, UTC)
    )
    run_replay(settings, tmp_path / "t.jsonl", spec)
    # Per partition, Kafka's offsets_for_times gives the first offset stamped at or
    # after the time; the publisher stamps in offset order within a partition.
    window = [m for m in stored if since <= m.timestamp < until]
    assert read_lines(tmp_path / "t.jsonl") == expected_lines(window)


def test_interrupted_replay_resumes_to_the_same_bytes_and_keeps_its_bound(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, stored = published
    own = fresh_prefix(settings)
    copy_to(own, stored)
    whole = tmp_path / "whole.jsonl"
    run_replay(own, whole, batch_size=50)

    out = tmp_path / "cut.jsonl"
    batches = 0

    def interrupt(state: ReplayCheckpoint) -> None:
        nonlocal batches
        batches += 1
        if batches == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_replay(own, out, batch_size=50, checkpoint_every=50, after_batch=interrupt)
    recorded = ReplayCheckpoint.load(tmp_path / "cut.jsonl.replay-checkpoint.json")
    assert not recorded.complete
    assert 0 < recorded.events < len(stored)
    # A write that happened after the last checkpoint, and new traffic after the bound.
    with out.open("ab") as tail:
        tail.write(b'{"partial": tr')
    copy_to(own, stored[:30])
    summary = run_replay(own, out, batch_size=50)
    assert summary.resumed
    assert summary.events == len(stored)
    assert out.read_bytes() == whole.read_bytes()


def test_sigkilled_replay_resumes_to_the_same_bytes(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, _ = published
    whole = tmp_path / "whole.jsonl"
    run_replay(settings, whole, batch_size=1000)
    out = tmp_path / "killed.jsonl"
    checkpoint = tmp_path / "killed.jsonl.replay-checkpoint.json"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
    }
    command = [
        sys.executable,
        "-m",
        "turnaudit.cli",
        "replay",
        "--into",
        f"jsonl:{out}",
        "--batch-size",
        "1",
        "--checkpoint-every",
        "1",
    ]
    process = subprocess.Popen(
        command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if ReplayCheckpoint.load(checkpoint).events >= 50:
                    break
            except ConfigurationError:  # not written yet
                pass
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(30)
    assert process.returncode == -signal.SIGKILL, "the replay ended before it was killed"
    assert not ReplayCheckpoint.load(checkpoint).complete
    done = subprocess.run(
        command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "(resumed)" in done.stdout
    assert out.read_bytes() == whole.read_bytes()


def test_replay_leaves_a_live_groups_offsets_alone(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, _ = published
    topic = settings.topics.turn_events
    group = f"live-{uuid.uuid4().hex[:8]}"
    live = Consumer(settings.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        committed = [TopicPartition(topic, p, 10 + p) for p in range(3)]
        live.commit(offsets=committed, asynchronous=False)
        before = {
            tp.partition: tp.offset
            for tp in live.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        }
        assert before == {0: 10, 1: 11, 2: 12}
        run_replay(settings, tmp_path / "r.jsonl")
        after = {
            tp.partition: tp.offset
            for tp in live.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        }
        assert after == before
    finally:
        live.close()


def test_a_checkpoint_of_other_arguments_is_refused(
    published: tuple[KafkaSettings, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, _ = published
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    out = tmp_path / "o.jsonl"
    assert main(["replay", "--partitions", "1", "--into", f"jsonl:{out}"]) == 0
    capsys.readouterr()
    assert main(["replay", "--partitions", "2", "--into", f"jsonl:{out}"]) == 2
    assert "belongs to a replay with other arguments" in capsys.readouterr().err
    assert main(["replay", "--into", f"parquet:{out}"]) == 2
    assert "unknown sink kind" in capsys.readouterr().err


def test_metrics_replay_is_openmetrics_of_its_own_job_and_the_same_twice(
    published: tuple[KafkaSettings, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, stored = published
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    first, second = tmp_path / "a.om", tmp_path / "b.om"
    assert main(["replay", "--into", f"metrics:{first}", "--batch-size", "64"]) == 0
    assert main(["replay", "--into", f"metrics:{second}", "--batch-size", "1000"]) == 0
    capsys.readouterr()
    text = first.read_text(encoding="utf-8")
    assert first.read_bytes() == second.read_bytes()
    assert text.endswith("# EOF\n")
    families = list(text_string_to_metric_families(text))
    samples = [s for f in families for s in f.samples]
    assert samples
    assert all(s.labels.get("job") == "turnaudit-replay" for s in samples)
    assert not any(s.name.endswith("_created") for s in samples)
    expected = TurnCounts()
    for m in stored:
        decoded = DECODE(m.value)
        expected.add(decoded.event, decoded.writer_version)
    assert expected.turns > 0
    # The same turns counted the way verify counts them from the range.
    assert metric_totals(text.replace("# EOF\n", "")) == {
        "turns": expected.turns,
        "stub": expected.stub,
        "refused": expected.refused,
        "hedged": expected.hedged,
    }
