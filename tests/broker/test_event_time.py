"""``--time event`` against a broker: records whose Kafka timestamps are not their turns'
``occurred_at`` (a turn spooled during an outage and drained minutes later, a turn
stored early) are selected by ``occurred_at`` by verify, replay and tail alike."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.unit.verify.scenario import DECODE, ENCODE_V3
from turnaudit.cli import main
from turnaudit.commands import evaluation
from turnaudit.consumers.tail import tail_turns
from turnaudit.evaluation.errors import NotReproducedError
from turnaudit.identity import TurnStamper
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.replay import ReplayRequest, ReplayTarget, replay
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings

pytestmark = pytest.mark.broker

MINUTE = 60_000
TURNS = 30
SPOOLED, EARLY = 10, 3  # turn 10 stored 15 minutes late; turn 3 stored 4 minutes late


def iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat()


def publish(settings: KafkaSettings, base: int) -> list[dict[str, Any]]:
    """Turn i happened at base + i minutes and is stored 2 s later, but for two."""
    stamper = TurnStamper(producer_id="p-event-time")
    producer = KafkaProducer(settings.client_config())
    events = []
    for i, event in enumerate(
        TurnRuntimeSimulator(4, schema_versions=(3,), concurrent_sessions=3).events(TURNS)
    ):
        event["occurred_at"] = base + i * MINUTE
        stamper.stamp(event)
        value = ENCODE_V3(event)
        stamper.commit(event, value)
        stored = base + i * MINUTE + {SPOOLED: 15 * MINUTE, EARLY: 4 * MINUTE}.get(i, 2000)
        producer.produce(
            settings.topics.turn_events, value, event["session_id"].encode(), timestamp=stored
        )
        events.append(dict(event))
    assert producer.flush(30) == 0
    return events


def test_a_spooled_turn_falls_in_its_event_time_window_for_verify_replay_and_tail(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = (int(time.time()) - 3600) * 1000  # an hour ago: inside any retention
    events = publish(kafka_settings, base)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", kafka_settings.topics.prefix)
    since, until = base + 5 * MINUTE, base + 15 * MINUTE  # turns 5..14 happened in it
    window = ["--from", iso(since), "--to", iso(until)]
    in_window = {e["event_id"] for e in events[5:15]}
    assert events[SPOOLED]["event_id"] in in_window
    assert events[EARLY]["event_id"] not in in_window

    # By broker time the range is not the window's turns: the spooled turn is stored
    # after --to (and offsets_for_times ends its partition's range at it).
    out = tmp_path / "broker.jsonl"
    assert main(["replay", *window, "--into", f"jsonl:{out}"]) == 0
    by_broker = {json.loads(line)["event"]["event_id"] for line in out.read_text().splitlines()}
    assert events[SPOOLED]["event_id"] not in by_broker
    assert events[EARLY]["event_id"] in by_broker

    # verify: by occurred_at, with or without a slack.
    capsys.readouterr()
    for slack in ([], ["--slack", "1200"]):
        code = main(["verify", "--json", "--time", "event", *window, *slack])
        report = json.loads(capsys.readouterr().out)
        assert code == 0, report["unexplained"]
        assert report["counts"]["turns"] == 10
        assert report["event_time"]["window_ms"] == [since, until]

    # replay: the same turns.
    out = tmp_path / "window.jsonl"
    assert (
        main(["replay", "--time", "event", *window, "--slack", "1200", "--into", f"jsonl:{out}"])
        == 0
    )
    replayed = {json.loads(line)["event"]["event_id"] for line in out.read_text().splitlines()}
    assert replayed == in_window

    # eval rebuild: its range is a replay of the request it builds (the HTIR assembly
    # and the auditor are left out here): by occurred_at too.
    requests: list[ReplayRequest] = []

    def rebuild(
        _settings: KafkaSettings,
        _decode: object,
        request: ReplayRequest,
        *_args: object,
        **_kw: object,
    ) -> None:
        requests.append(request)
        raise NotReproducedError("stop here")

    monkeypatch.setattr(evaluation, "load_task_labels", lambda _path: {})
    monkeypatch.setattr(evaluation, "rebuild_evidence", rebuild)
    assert (
        main(
            [
                "eval",
                "rebuild",
                "--time",
                "event",
                *window,
                "--slack",
                "1200",
                "--labels",
                str(tmp_path / "labels.json"),
                "--output",
                str(tmp_path / "ev.json"),
            ]
        )
        == 1
    )
    [request] = requests
    rebuilt = tmp_path / "rebuild.jsonl"
    replay(kafka_settings, DECODE, request, ReplayTarget.file("jsonl", rebuilt))
    assert {
        json.loads(line)["event"]["event_id"] for line in rebuilt.read_text().splitlines()
    } == in_window

    # tail: from the window's start on, by occurred_at (turns 5..29).
    printed = io.StringIO()
    stop = threading.Event()
    timer = threading.Timer(30, stop.set)
    timer.start()
    try:
        count = tail_turns(
            kafka_settings,
            printed,
            since=datetime.fromtimestamp(since / 1000, UTC),
            event_time=True,
            slack=None,
            limit=TURNS - 5,
            stop=stop,
            show_verdicts=False,
        )
    finally:
        timer.cancel()
    assert count == TURNS - 5
    lines = printed.getvalue().splitlines()
    shown = {line.split()[1] for line in lines}
    expected = {f"{e['session_id']}#{e['turn']}" for e in events[5:]}
    assert shown == expected


def record_times(settings: KafkaSettings) -> dict[str, tuple[int, int]]:
    """Event id -> (record timestamp, occurred_at) of every turn on the topic."""
    topic = settings.topics.turn_events
    found = {}
    for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
        event = DECODE(msg.value() or b"").event
        found[event["event_id"]] = (msg.timestamp()[1], event["occurred_at"])
    return found


def test_published_and_spooled_turns_are_stored_at_their_occurred_at(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Turns 0..9 are published while no broker answers (connection refused): the
    publisher hands them back to the spool at close. The next publisher on the
    spool drains them minutes later, then publishes turns 10..29 directly. Every
    record's timestamp is its turn's occurred_at, so a broker-time window holds
    exactly the turns that happened in it, as an event-time window does."""
    base = (int(time.time()) - 3600) * 1000
    source = TurnRuntimeSimulator(5, schema_versions=(3,), concurrent_sessions=3).events(TURNS)
    events = []
    for i, event in enumerate(source):
        event["occurred_at"] = base + i * MINUTE
        events.append(event)
    spool = tmp_path / "spool"
    away = dataclasses.replace(kafka_settings, bootstrap_servers="127.0.0.1:9")
    down = TurnEventPublisher(away, spool_dir=spool, checkpoints=CheckpointSettings())
    ids = [down.publish(e) for e in events[:10]]
    report = down.close(timeout=3)
    assert report.undelivered == 10, report
    assert report.delivered == 0, report

    up = TurnEventPublisher(
        kafka_settings, spool_dir=spool, probe_interval=0.2, checkpoints=CheckpointSettings()
    )
    deadline = time.monotonic() + 60
    while up.stats().spooled:  # the inherited turns drain first
        assert time.monotonic() < deadline, up.stats()
        time.sleep(0.05)
    ids += [up.publish(e) for e in events[10:]]
    assert up.close().ok

    stored = record_times(kafka_settings)
    assert set(stored) == set(ids)
    for event_id, (timestamp, occurred) in stored.items():
        assert timestamp == occurred, event_id
    assert [stored[i][1] for i in ids] == [base + i * MINUTE for i in range(TURNS)]

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", kafka_settings.topics.prefix)
    since, until = base + 5 * MINUTE, base + 15 * MINUTE  # turns 5..14: 5 drained, 5 direct
    window = ["--from", iso(since), "--to", iso(until)]
    in_window = set(ids[5:15])
    capsys.readouterr()
    for time_kind in ("broker", "event"):
        code = main(["verify", "--json", "--time", time_kind, *window])
        verified = json.loads(capsys.readouterr().out)
        assert code == 0, verified["unexplained"]
        assert verified["counts"]["turns"] == 10
        out = tmp_path / f"{time_kind}.jsonl"
        assert main(["replay", "--time", time_kind, *window, "--into", f"jsonl:{out}"]) == 0
        capsys.readouterr()
        assert {
            json.loads(line)["event"]["event_id"] for line in out.read_text().splitlines()
        } == in_window

    requests: list[ReplayRequest] = []

    def rebuild(
        _settings: KafkaSettings,
        _decode: object,
        request: ReplayRequest,
        *_args: object,
        **_kw: object,
    ) -> None:
        requests.append(request)
        raise NotReproducedError("stop here")

    monkeypatch.setattr(evaluation, "load_task_labels", lambda _path: {})
    monkeypatch.setattr(evaluation, "rebuild_evidence", rebuild)
    assert (
        main(
            [
                "eval",
                "rebuild",
                *window,
                "--labels",
                str(tmp_path / "labels.json"),
                "--output",
                str(tmp_path / "ev.json"),
            ]
        )
        == 1
    )
    [request] = requests
    rebuilt = tmp_path / "rebuild.jsonl"
    replay(kafka_settings, DECODE, request, ReplayTarget.file("jsonl", rebuilt))
    assert {
        json.loads(line)["event"]["event_id"] for line in rebuilt.read_text().splitlines()
    } == in_window

    # tail by broker time from the window's start: turns 5..29, the drained ones first.
    printed, stop = io.StringIO(), threading.Event()
    timer = threading.Timer(30, stop.set)
    timer.start()
    try:
        count = tail_turns(
            kafka_settings,
            printed,
            since=datetime.fromtimestamp(since / 1000, UTC),
            limit=TURNS - 5,
            stop=stop,
            show_verdicts=False,
        )
    finally:
        timer.cancel()
    assert count == TURNS - 5
    shown = {line.split()[1] for line in printed.getvalue().splitlines()}
    assert shown == {f"{e['session_id']}#{e['turn']}" for e in events[5:]}
