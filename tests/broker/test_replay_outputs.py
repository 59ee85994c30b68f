"""Replay outputs and order on the real broker: the block order and its resume, the log sink,
verify's report and another topic, each the same bytes twice; several processes sharing a range."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.replay_members import run_replay_members
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
from turnaudit.commands.replay import OUTPUT_KINDS
from turnaudit.consumers.replay import SOURCE_HEADER
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import topic_specs
from turnaudit.replay import ReplayCheckpoint, ReplayRequest, ReplayTarget, replay
from turnaudit.replay import order as replay_order
from turnaudit.settings import KafkaSettings
from turnaudit.verify.run import run_verify

pytestmark = pytest.mark.broker


# The simulated runtime's clock is a day ahead of the broker's: its turns happen
# tomorrow and are stored now (the publisher caps a record timestamp at now).
AHEAD = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)


@pytest.fixture(scope="module")
def published(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[KafkaSettings, list[Stored]]:
    """600 turns (v1-v3) and 60 copies of some of them stored again (redeliveries)."""
    settings = fresh_topics(kafka_bootstrap)
    publish(
        settings,
        tmp_path_factory.mktemp("spool"),
        seed=29,
        events=600,
        versions=(1, 2, 3),
        start=AHEAD,
    )
    first = stored_range(settings)
    copy_to(settings, sorted(first, key=lambda m: (m.partition, m.offset))[::10])
    return settings, stored_range(settings)


def into(settings: KafkaSettings, kind: str, path: Path, **kwargs: Any) -> Any:
    return replay(
        settings,
        DECODE,
        kwargs.pop("request", ReplayRequest()),
        ReplayTarget.file(kind, path),
        outputs=OUTPUT_KINDS,
        **kwargs,
    )


def interrupted_at(batches: int) -> Any:
    seen = 0

    def hook(state: ReplayCheckpoint) -> None:
        nonlocal seen
        seen += 1
        if seen == batches:
            raise KeyboardInterrupt

    return hook


def block_order(messages: list[Stored], block: int) -> list[Stored]:
    """The stated order: partitions ascending, interleaved in blocks of ``block`` messages."""
    queues = {
        p: sorted((m for m in messages if m.partition == p), key=lambda m: m.offset)
        for p in sorted({m.partition for m in messages})
    }
    ordered: list[Stored] = []
    while any(queues.values()):
        for queue in queues.values():
            ordered += queue[:block]
            del queue[:block]
    return ordered


def test_partitions_interleave_in_blocks_and_a_resume_mid_block_gives_the_same_bytes(
    published: tuple[KafkaSettings, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, stored = published
    monkeypatch.setattr(replay_order, "BLOCK_MESSAGES", 7)
    whole = tmp_path / "whole.jsonl"
    into(settings, "jsonl", whole, batch_size=1000)
    lines = read_lines(whole)
    assert [(x["partition"], x["offset"]) for x in lines] == [
        (m.partition, m.offset) for m in block_order(stored, 7)
    ]
    assert [x["partition"] for x in lines[:22]] == [0] * 7 + [1] * 7 + [2] * 7 + [0]

    cut = tmp_path / "cut.jsonl"
    for batches in (3, 4, 9):  # interrupted three times, each time mid-block (batches of 5)
        with pytest.raises(KeyboardInterrupt):
            into(
                settings,
                "jsonl",
                cut,
                batch_size=5,
                checkpoint_every=5,
                after_batch=interrupted_at(batches),
            )
        state = ReplayCheckpoint.load(cut.with_name(cut.name + ".replay-checkpoint.json"))
        assert not state.complete
    assert ReplayCheckpoint.load(cut.with_name(cut.name + ".replay-checkpoint.json")).taken
    assert into(settings, "jsonl", cut, batch_size=11).resumed
    assert cut.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize(("budget", "floor"), [(1, 1), (40, 14), (60_000, 2_000)])
def test_the_block_order_holds_whatever_the_buffer_budget_pauses(
    published: tuple[KafkaSettings, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    budget: int,
    floor: int,
) -> None:
    # A tiny budget pauses and resumes partitions all the time: what comes out
    # is still the stated order, each message once.
    settings, stored = published
    monkeypatch.setattr(replay_order, "BLOCK_MESSAGES", 7)
    monkeypatch.setattr(replay_order, "_BUFFER_BUDGET", budget)
    monkeypatch.setattr(replay_order, "_BUFFER_FLOOR", floor)
    out = tmp_path / "out.jsonl"
    into(settings, "jsonl", out, batch_size=50)
    assert [(x["partition"], x["offset"]) for x in read_lines(out)] == [
        (m.partition, m.offset) for m in block_order(stored, 7)
    ]


def test_log_output_is_the_same_bytes_twice_whatever_the_caller_has_bound(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, stored = published
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    into(settings, "logs", first, batch_size=64)
    with structlog.contextvars.bound_contextvars(request_id="caller-context"):
        into(settings, "logs", second, batch_size=1000)
    assert first.read_bytes() == second.read_bytes()
    lines = [json.loads(x) for x in first.read_text("utf-8").splitlines()]
    assert len(lines) == len(stored)
    assert [(x["partition"], x["offset"]) for x in lines] == [
        (m.partition, m.offset) for m in block_order(stored, replay_order.BLOCK_MESSAGES)
    ]
    assert all("request_id" not in x for x in lines)
    # Each line is stamped with its turn's time, not the clock's.
    assert all(x["timestamp"].startswith(x["occurred_at"][:19]) for x in lines)
    redelivered = sum(x["redelivered"] for x in lines)
    assert redelivered == len(stored) - 600


def test_log_output_interrupted_resumes_with_the_tracker_warmed_to_the_same_bytes(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, _ = published
    whole, cut = tmp_path / "whole.log", tmp_path / "cut.log"
    into(settings, "logs", whole)
    # Cut in partition 2, after originals whose copies come later in the partition.
    for batches in (9, 2):
        with pytest.raises(KeyboardInterrupt):
            into(
                settings,
                "logs",
                cut,
                batch_size=50,
                checkpoint_every=50,
                after_batch=interrupted_at(batches),
            )
    with cut.open("ab") as tail:
        tail.write(b'{"event":"turn","torn')
    assert into(settings, "logs", cut, batch_size=50).resumed
    assert cut.read_bytes() == whole.read_bytes()


def test_verify_output_is_verify_s_report_and_the_same_bytes_twice(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, stored = published
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    into(settings, "verify", first, batch_size=64)
    into(settings, "verify", second, batch_size=1000)
    assert first.read_bytes() == second.read_bytes()
    report = json.loads(first.read_text("utf-8"))
    direct = run_verify(settings, DECODE, RangeSpec()).as_json()
    assert report["counts"] == direct["counts"]
    assert report["counts"]["turns"] == 600
    assert report["messages"] == len(stored)
    assert report["redeliveries"] + report["duplicates"]["count"] == len(stored) - 600
    assert report["verdict"] == direct["verdict"]


def test_topic_output_copies_keys_values_and_times_with_the_source_and_refuses_live_topics(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, stored = published
    target = f"{settings.topics.prefix}copy"
    admin = AdminClient(settings.client_config())
    admin.create_topics([NewTopic(target, 3, 1)])[target].result(30)
    summary = replay(
        settings,
        DECODE,
        ReplayRequest(),
        ReplayTarget.parse(f"topic:{target}", OUTPUT_KINDS, tmp_path / "copy.ckpt"),
        outputs=OUTPUT_KINDS,
    )
    assert summary.events == len(stored)
    copies = list(read_range(settings, target, None, end_offsets(settings, target)))
    assert len(copies) == len(stored)
    by_source = {}
    for msg in copies:
        headers = dict(msg.headers() or [])
        source = headers[SOURCE_HEADER]
        assert isinstance(source, bytes)
        by_source[source.decode()] = msg
    original = {f"{settings.topics.turn_events}/{m.partition}/{m.offset}": m for m in stored}
    assert by_source.keys() == original.keys()
    for where, msg in by_source.items():
        m = original[where]
        assert (msg.key(), msg.value(), msg.timestamp()[1]) == (m.key, m.value, m.timestamp)
    # A session's turns stay in one partition of the copy.
    partitions: dict[bytes | None, set[int | None]] = {}
    for msg in copies:
        partitions.setdefault(msg.key(), set()).add(msg.partition())
    assert all(len(found) == 1 for found in partitions.values())
    with pytest.raises(Exception, match="live topic"):
        replay(
            settings,
            DECODE,
            ReplayRequest(),
            ReplayTarget.parse(f"topic:{settings.topics.dlq}", OUTPUT_KINDS, tmp_path / "dlq.ckpt"),
            outputs=OUTPUT_KINDS,
        )


def test_three_processes_share_a_range_each_message_once_each_stopping_at_the_bound(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    settings, stored = published
    own = fresh_prefix(settings)
    copy_to(own, stored)
    bound = {p: o - 15 for p, o in end_offsets(own, own.topics.turn_events).items()}
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": own.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": own.topics.prefix,
    }
    group = f"g-{uuid.uuid4().hex[:8]}"
    to_offsets = ",".join(f"{p}:{o}" for p, o in sorted(bound.items()))
    outs = [tmp_path / f"member-{i}.jsonl" for i in range(3)]
    run_replay_members(
        [
            *("--group", group, "--to-offsets", to_offsets, "--members", "3"),
            *("--batch-size", "20", "--checkpoint-every", "40"),
        ],
        outs,
        env,
    )
    merged = [line for out in outs for line in read_lines(out)]
    in_range = [m for m in stored if m.offset < bound[m.partition]]
    assert len(merged) == len(in_range)  # every message once: no repeat, none missing
    assert sorted(merged, key=lambda x: (x["partition"], x["offset"])) == expected_lines(in_range)
    written = [
        ReplayCheckpoint.load(out.with_name(out.name + ".replay-checkpoint.json")) for out in outs
    ]
    assert all(state.complete for state in written)
    assert sum(state.events for state in written) == len(in_range)
    assert all(state.events > 0 for state in written)  # the range was shared
    assert all(
        state.end == {} or state.end == {p: bound[p] for p in state.end} for state in written
    )


def test_wrong_replay_arguments_get_one_line(
    published: tuple[KafkaSettings, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, _ = published
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    monkeypatch.chdir(tmp_path)
    cases = {
        ("--group", "g", "--into", f"metrics:{tmp_path / 'm.om'}"): "computed over the whole range",
        (
            "--time",
            "event",
            "--from",
            "2026-11-01",
            "--into",
            f"jsonl:{tmp_path / 'e.jsonl'}",
        ): "needs both --from and --to",
        ("--into", f"topic:{settings.topics.turn_events}"): "live topic",
        ("--into", "jsonl"): "write KIND:WHERE",
    }
    for args, said in cases.items():
        assert main(["replay", *args]) == 2
        err = capsys.readouterr().err
        assert said in err
        assert len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.glob("*.replay-checkpoint.json"))  # refused: nothing recorded


@pytest.mark.parametrize("kind", ["topic", "htir-topic"])
def test_every_live_topic_is_refused_as_a_replay_target_and_nothing_is_written(
    published: tuple[KafkaSettings, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    settings, _ = published
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    monkeypatch.chdir(tmp_path)
    live = [spec.name for spec in topic_specs(settings)]
    before = {topic: end_offsets(settings, topic) for topic in live}
    for topic in live:
        assert main(["replay", "--into", f"{kind}:{topic}"]) == 2, topic
        err = capsys.readouterr().err
        assert f"{kind}:{topic}: a replay does not write to the live topic" in err
        assert len(err.strip().splitlines()) == 1, err
    assert {topic: end_offsets(settings, topic) for topic in live} == before
    assert not list(tmp_path.glob("*.replay-checkpoint.json"))


def test_event_time_window_reads_only_records_stored_within_the_slack(
    published: tuple[KafkaSettings, list[Stored]], tmp_path: Path
) -> None:
    """Simulated turns happen tomorrow but were stored today: a window on their
    occurred_at finds them in the whole stream, not within a minute's slack of the window."""
    settings, stored = published
    window = RangeSpec(AHEAD, AHEAD + timedelta(days=1))
    whole = into(
        settings, "jsonl", tmp_path / "all.jsonl", request=ReplayRequest(window, event_time=True)
    )
    assert whole.events == len(stored)  # every turn of the fixture happened that day
    near = into(
        settings,
        "jsonl",
        tmp_path / "near.jsonl",
        request=ReplayRequest(window, event_time=True, slack=timedelta(minutes=1)),
    )
    assert near.events == 0
    assert (tmp_path / "near.jsonl").read_bytes() == b""
