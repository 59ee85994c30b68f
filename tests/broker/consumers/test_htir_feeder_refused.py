"""The HTIR feeder (``turnaudit htir feed``, a real process) when the broker
refuses a trace for good: the traces topic's ``max.message.bytes`` is lowered
below the size of some traces, so the broker answers MSG_SIZE_TOO_LARGE.

The feeder's contract (consumers/htir_feeder.py): a trace refused as too large
is produced again alone, up to ``SIZE_RETRIES`` times (its first refusal may be
its batch's: the broker refuses a batch whole), so a trace that fits is stored
even when it shared a batch with an oversized one. A trace refused for good is
logged once as an error and not produced again on every poll; the offsets of
its turns stay held, so the group's committed offset never passes its first
turn, and a feeder restarted once the topic takes it re-reads those turns and
publishes it. Traces re-read with it may be published again (same task id,
same steps); the manifest holds every task once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.support.events import encode, task_turn
from tests.support.services import service_env, turnaudit_process
from tests.support.streams import http_get, produce_raw, wait_for
from turnaudit.consumers.htir_feeder import SIZE_RETRIES
from turnaudit.htir import HtirTrace, TraceClose
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

PARTITIONS = 3  # the kafka_settings fixture's
# A trace step is about 80 bytes on the wire (surfaces dropped by default) and
# the feeder's producer does not compress (librdkafka's default, none), so a
# 150-step trace (~12 KB) is refused by a topic that takes 4 KB, and any batch
# of the 2-step traces (~215 B each) is taken. The test checks both sizes on
# the records the feeder really produced.
SMALL_STEPS = 2
BIG_STEPS = 150
LIMIT = 4096
RAISED = 1_048_588  # the broker's default max.message.bytes
# Turn partition of each session, in stream order: three sessions share
# partition 0, so a refused trace there has turns before and after it.
TURN_PARTITIONS = (0, 1, 0, 2, 0)
# librdkafka puts a partition's messages in one batch and the broker refuses a
# batch whole: a trace that fits but shares the oversized one's batch is refused
# with it, then produced again alone and stored. The oversized traces go to a
# traces-topic partition of their own and the others elsewhere, except the ones
# a case puts beside them on purpose (``sharing``).
REFUSED_TRACE_PARTITION = 0


@dataclass(frozen=True)
class Session:
    session_id: str
    task_id: str
    steps: int
    shares_batch: bool  # its trace goes to the oversized traces' partition

    @property
    def oversized(self) -> bool:
        return self.steps == BIG_STEPS


def consistent_key(stem: str, partition: int) -> str:
    """A key librdkafka's default partitioner (CRC32 of the key) puts on ``partition``."""
    n = 0
    while zlib.crc32(f"{stem}-{n}".encode()) % PARTITIONS != partition:
        n += 1
    return f"{stem}-{n}"


def stream_plan(oversized: tuple[int, ...], sharing: tuple[int, ...]) -> list[Session]:
    sessions = []
    for position, partition in enumerate(TURN_PARTITIONS):
        big, shares = position in oversized, position in sharing
        trace_partition = (
            REFUSED_TRACE_PARTITION if big or shares else 1 + position % (PARTITIONS - 1)
        )
        sessions.append(
            Session(
                session_id=consistent_key(f"s{position}", partition),
                task_id=consistent_key(f"task{position}", trace_partition),
                steps=BIG_STEPS if big else SMALL_STEPS,
                shares_batch=shares,
            )
        )
    return sessions


def held_at(
    sessions: list[Session],
    refused: set[str],
    turns: dict[str, list[tuple[int, int]]],
    end: dict[int, int],
) -> dict[int, int]:
    """Where the group's committed offsets must stop: on each partition, the
    first turn of its first refused trace; a partition without one, its end."""
    held = dict(end)
    for s in sessions:
        if s.task_id in refused:
            partition, offset = turns[s.session_id][0]
            held[partition] = min(held[partition], offset)
    return held


def publish(settings: KafkaSettings, sessions: list[Session]) -> dict[str, list[tuple[int, int]]]:
    """Each session's task onto the turn topic, one session after the other;
    per session, the (partition, offset) of its turns as the broker stored them."""
    events = [
        task_turn(s.session_id, s.task_id, step, last=s.steps - 1)
        for s in sessions
        for step in range(s.steps)
    ]
    produce_raw(settings, [(e["session_id"].encode(), encode(e)) for e in events])
    topic = settings.topics.turn_events
    found: dict[str, list[tuple[int, int]]] = {}
    for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
        key = msg.key()
        partition, offset = msg.partition(), msg.offset()
        assert isinstance(key, bytes)
        assert partition is not None
        assert offset is not None
        found.setdefault(key.decode(), []).append((partition, offset))
    return found


def set_max_message_bytes(settings: KafkaSettings, topic: str, max_bytes: int) -> None:
    admin = AdminClient(settings.client_config())
    entry = ConfigEntry(
        "max.message.bytes", str(max_bytes), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def committed(settings: KafkaSettings, group: str) -> dict[int, int]:
    probe = Consumer(settings.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        found = probe.committed(
            [TopicPartition(settings.topics.turn_events, p) for p in range(PARTITIONS)],
            timeout=10,
        )
    finally:
        probe.close()
    return {tp.partition: max(tp.offset, 0) for tp in found}


def stored_traces(settings: KafkaSettings) -> list[tuple[HtirTrace, int, int]]:
    """The traces on the traces topic: (trace, its partition, its record's value size)."""
    topic = settings.topics.htir_traces
    decode = TurnEventDeserializer(shipped_catalog("htir_trace"))
    found = []
    for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
        value, partition = msg.value(), msg.partition()
        assert isinstance(value, bytes)
        assert partition is not None
        found.append((HtirTrace.from_avro(decode(value).event), partition, len(value)))
    return found


def log_lines(path: Path) -> list[dict[str, Any]]:
    """The structlog JSON lines of a feeder's stderr."""
    lines = []
    for text in path.read_text().splitlines():
        if text.startswith("{"):
            lines.append(json.loads(text))
    return lines


def not_stored(path: Path) -> list[dict[str, Any]]:
    """The feeder's error line for each trace refused for good."""
    return [
        line
        for line in log_lines(path)
        if line.get("event") == "htir_trace_not_stored" and line.get("level") == "error"
    ]


def retried_alone(path: Path) -> list[dict[str, Any]]:
    """The feeder's warning for each trace refused as too large and produced again alone."""
    return [
        line
        for line in log_lines(path)
        if line.get("event") == "htir_trace_not_stored" and line.get("alone") is True
    ]


def refusals(path: Path, topic: str) -> list[str]:
    """The producer wrapper's line for each failed delivery report on ``topic``:
    its error codes. A trace produced again would be refused, and said, again."""
    return [
        line["code"]
        for line in log_lines(path)
        if line.get("event") == "delivery_failed" and line.get("topic") == topic
    ]


def healthy(env: dict[str, str]) -> bool:
    port = int(env["TURNAUDIT_HTTP_PORT"])
    try:
        ready, _ = http_get(port, "/healthz")
        live, _ = http_get(port, "/livez")
    except OSError:
        return False
    return ready == live == 200


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def check_trace(
    trace: HtirTrace, session: Session, turns: list[tuple[int, int]], topic: str
) -> None:
    """The trace is the session's task, whole, from the turns the stream holds."""
    assert trace.session_id == session.session_id
    assert trace.task_family == "code-fix"
    assert trace.closed_by == TraceClose.END_OF_TASK
    assert trace.topic == topic
    assert trace.gap is None
    assert [s["task_step"] for s in trace.steps if s["kind"] == "turn"] == list(
        range(session.steps)
    )
    assert trace.event_ids == [f"{session.session_id}-{i}" for i in range(session.steps)]
    assert [tuple(t) for t in trace.turn_offsets] == turns


class TestATraceRefusedForGood:
    @pytest.mark.parametrize(
        ("oversized", "sharing"),
        [((0,), ()), ((2,), ()), ((0, 4), ()), ((2,), (3,))],
        ids=[
            "first-session",
            "middle-session",
            "first-and-last-session",
            "middle-session-sharing-its-batch",
        ],
    )
    def test_is_said_once_holds_its_turns_and_lands_after_a_restart(
        self,
        kafka_settings: KafkaSettings,
        tmp_path: Path,
        oversized: tuple[int, ...],
        sharing: tuple[int, ...],
    ) -> None:
        settings = kafka_settings
        assert settings.partitions == PARTITIONS
        sessions = stream_plan(oversized, sharing)
        by_task = {s.task_id: s for s in sessions}
        big = {s.task_id for s in sessions if s.oversized}
        sharing = {s.task_id for s in sessions if s.shares_batch}
        turns = publish(settings, sessions)
        end = end_offsets(settings, settings.topics.turn_events)
        # The oversized traces are refused whatever the batching: the group
        # never commits past their first turns.
        bound = held_at(sessions, big, turns, end)
        assert any(bound[p] == end[p] > 0 for p in end)  # a partition with none

        set_max_message_bytes(settings, settings.topics.htir_traces, LIMIT)
        group = f"feeder-refused-{uuid.uuid4().hex[:8]}"
        env = service_env(settings, group)
        manifest = tmp_path / "manifest.jsonl"
        feed = ["htir", "feed", "--idle-timeout", "2", "--manifest", str(manifest)]
        first_log = tmp_path / "first.log"
        seen: list[dict[int, int]] = []  # every committed position observed

        def refused_so_far() -> set[str]:
            return {line["task_id"] for line in not_stored(first_log)}

        def settled_refusing() -> bool:
            seen.append(committed(settings, group))
            assert all(seen[-1][p] <= bound[p] for p in bound), (seen[-1], bound)
            refused = refused_so_far()
            assert refused <= big  # only its own size refuses a trace for good
            stored = {t.task_id for t, _, _ in stored_traces(settings)}
            assert not stored & refused  # a refused trace is not produced again
            return (
                big <= refused
                and stored | refused == set(by_task)
                and seen[-1] == held_at(sessions, refused, turns, end)
            )

        with turnaudit_process(feed, env, first_log) as first:
            assert wait_for(settled_refusing, timeout=60), (seen[-1:], bound)
            # A trace that fits is stored without a restart, its batch shared or not.
            assert sharing <= {t.task_id for t, _, _ in stored_traces(settings)}
            # More polls and auto-commits (every second) go by: the refusal is
            # not produced and said again, and the position does not move on.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                seen.append(committed(settings, group))
                time.sleep(0.3)
            assert first.poll() is None
            assert healthy(env)
            errors = not_stored(first_log)
            stop(first)
        refused = {line["task_id"] for line in errors}
        assert refused == big
        assert not refused & sharing
        held = held_at(sessions, refused, turns, end)
        assert seen[-1] == held
        # Never past a refused trace's first turn on its partition; a
        # partition without one read to its end.
        for position in seen:
            assert all(position[p] <= held[p] for p in held), (position, held)
        assert committed(settings, group) == held  # the drain commits no further
        assert any(held[p] == end[p] > 0 for p in end)
        # One error line per refused trace, naming it; nothing produced again.
        assert sorted(line["task_id"] for line in errors) == sorted(refused)
        for line in errors:
            assert line["level"] == "error"
            assert line["retried"] is False
            assert "too large" in line["error"]
        assert not_stored(first_log) == errors  # nothing more said up to the shutdown
        # Each refused trace was produced once with the others and SIZE_RETRIES
        # times alone, one refusal from the broker each time; a trace that fits
        # was refused only in a shared batch, at most once, then went alone.
        alone = Counter(line["task_id"] for line in retried_alone(first_log))
        for task_id in refused:
            assert alone[task_id] == SIZE_RETRIES
        for task_id in set(alone) - refused:
            assert task_id in sharing
            assert alone[task_id] == 1
        for line in retried_alone(first_log):
            assert line["level"] == "warning"
            assert line["retried"] is True
            assert "too large" in line["error"]
        traces_topic = settings.topics.htir_traces
        assert refusals(first_log, traces_topic) == ["MSG_SIZE_TOO_LARGE"] * (
            len(refused) + alone.total()
        )
        assert "Traceback" not in first_log.read_text()
        stored = stored_traces(settings)
        assert sorted(t.task_id for t, _, _ in stored) == sorted(set(by_task) - refused)
        for trace, _, _ in stored:
            session = by_task[trace.task_id]
            check_trace(trace, session, turns[session.session_id], settings.topics.turn_events)
        written = [json.loads(line)["task_id"] for line in manifest.read_text().splitlines()]
        assert sorted(written) == sorted(set(by_task) - refused)

        # The topic takes them again: a feeder restarted on the same group
        # re-reads the held turns and publishes the refused traces.
        set_max_message_bytes(settings, settings.topics.htir_traces, RAISED)
        second_log = tmp_path / "second.log"

        def refused_landed() -> bool:
            on_topic = {t.task_id for t, _, _ in stored_traces(settings)}
            return set(by_task) <= on_topic and committed(settings, group) == end

        with turnaudit_process(feed, env, second_log) as second:
            assert wait_for(refused_landed, timeout=60)
            assert healthy(env)
            stop(second)
        assert committed(settings, group) == end
        assert not_stored(second_log) == []
        assert retried_alone(second_log) == []
        assert refusals(second_log, traces_topic) == []
        assert "Traceback" not in second_log.read_text()

        stored = stored_traces(settings)
        copies = Counter(t.task_id for t, _, _ in stored)
        for trace, partition, size in stored:
            session = by_task[trace.task_id]
            check_trace(trace, session, turns[session.session_id], settings.topics.turn_events)
            first_partition, first_offset = turns[session.session_id][0]
            reread = first_offset >= held[first_partition]
            if session.oversized:
                assert size > LIMIT  # refused for its size: the records as produced
            else:
                assert size * len(sessions) < LIMIT // 2  # any batch of them fits
            assert (partition == REFUSED_TRACE_PARTITION) == (
                session.oversized or session.shares_batch
            )
            # A refused trace is stored once now. One stored before and re-read
            # with the held turns is published again (the same trace, as the
            # contract allows); one read before them is not read again.
            assert copies[trace.task_id] == (2 if reread and trace.task_id not in refused else 1)
        # The manifest holds every task once, the republished ones included.
        written = [json.loads(line)["task_id"] for line in manifest.read_text().splitlines()]
        assert sorted(written) == sorted(by_task)
