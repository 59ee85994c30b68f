"""``turnaudit verify`` on the real broker: exact counts, and every kind of tampering
with a stored range (removal, insertion, swap, edit) found, with stream and position."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.verify_helpers import (
    DECODE,
    Stored,
    copy_to,
    fresh_prefix,
    fresh_topics,
    publish,
    stored_range,
    verify_in_memory,
)
from turnaudit.cli import main
from turnaudit.identity import stream_of
from turnaudit.producers.simulator import GroundTruth
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.report import VerifyReport

pytestmark = pytest.mark.broker

ENCODE_V3 = SingleObjectSerializer(shipped_catalog().version(3))
EDITABLE = (
    "turn",
    "pack_id",
    "domain",
    "surface",
    "input_tokens",
    "versor_condition",
    "occurred_at",
    "prev_hash",
)


@pytest.fixture(scope="module")
def published(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[KafkaSettings, GroundTruth, list[Stored]]:
    settings = fresh_topics(kafka_bootstrap)
    truth = publish(
        settings, tmp_path_factory.mktemp("spool"), seed=17, events=600, versions=(1, 2, 3)
    )
    return settings, truth, stored_range(settings)


def run_cli(
    settings: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
) -> tuple[int, dict[str, Any]]:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    capsys.readouterr()
    code = main(["verify", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def chained_non_tail(messages: list[Stored]) -> list[int]:
    """Indexes of v3 events that have a later event in their stream."""
    last: dict[tuple[str, str], int] = {}
    chained = []
    for i, m in enumerate(messages):
        event = DECODE(m.value).event
        if event["producer_id"]:
            last[stream_of(event)] = i
            chained.append(i)
    return [i for i in chained if i not in last.values()]


def next_in_stream(messages: list[Stored], i: int) -> int:
    stream = stream_of(DECODE(messages[i].value).event)
    return next(
        j
        for j in range(i + 1, len(messages))
        if stream_of(DECODE(messages[j].value).event) == stream
    )


def findings(verifier_report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in verifier_report["unexplained"] if f["kind"] == kind]


def report_of(messages: list[Stored]) -> dict[str, Any]:
    return VerifyReport(
        {
            "topic": "copy",
            "description": "in memory",
            "partitions": {},
            "from": None,
            "to": None,
            "from_log_start": True,
        },
        verify_in_memory(messages),
    ).as_json()


def test_an_untouched_range_is_exactly_counted_and_verifies(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, truth, _ = published
    code, report = run_cli(settings, monkeypatch, capsys)
    assert report["verdict"] == "ok", report["unexplained"]
    assert code == 0
    counts = report["counts"]
    assert counts["turns"] == truth.events
    assert counts["refused"] == truth.refused
    assert counts["hedged"] == truth.hedged
    assert counts["stub"] == truth.by_path["STUB"]
    assert counts["by_schema_version"] == {
        str(k): v for k, v in sorted(truth.by_schema_version.items())
    }
    assert counts["action_risk_by_policy"] == dict(sorted(truth.by_output_policy.items()))
    assert {p: d["turns"] for p, d in counts["per_pack"].items()} == dict(truth.by_pack)
    assert report["lost"] == 0
    assert report["streams"]["chained"] > 0
    assert report["range"]["from_log_start"] is True


def test_an_offset_range_is_verified_on_its_own(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, _, messages = published
    # The second half of every partition: streams already begun are joined, not gaps.
    ends: dict[int, int] = {}
    for m in messages:
        ends[m.partition] = m.offset + 1
    start = ",".join(f"{p}:{e // 2}" for p, e in ends.items())
    code, report = run_cli(settings, monkeypatch, capsys, "--from-offsets", start)
    assert code == 0, report["unexplained"]
    assert report["messages"] == sum(e - e // 2 for e in ends.values())
    assert report["range"]["from_log_start"] is False


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), kind=st.sampled_from(["removed", "inserted", "swapped", "edited"]))
def test_tampering_with_a_copy_of_the_range_is_found_with_its_stream_and_position(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]], data: st.DataObject, kind: str
) -> None:
    _, _, messages = published
    copy = list(messages)
    i = data.draw(st.sampled_from(chained_non_tail(messages)), label="event")
    event = dict(DECODE(copy[i].value).event)
    stream = {"session_id": event["session_id"], "producer_id": event["producer_id"]}
    position = event["sequence"]
    if kind == "removed":
        del copy[i]
        expect, named = "lost", None
    elif kind == "inserted":
        forged = {**event, "event_id": uuid.uuid4().hex}
        copy.insert(i + 1, replace(copy[i], value=ENCODE_V3(forged)))
        expect, named = "position_reused", position
    elif kind == "swapped":
        j = next_in_stream(copy, i)
        copy[i], copy[j] = (
            replace(copy[j], partition=copy[i].partition),
            replace(copy[i], partition=copy[j].partition),
        )
        expect, named = "late_arrival", position
    else:
        name = data.draw(st.sampled_from(EDITABLE), label="field")
        event[name] = _edited(event[name])
        copy[i] = replace(copy[i], value=ENCODE_V3(event))
        expect, named = "chain_break", position + (name != "prev_hash")
    report = report_of(copy)
    assert report["verdict"] == "unexplained"
    found = findings(report, expect)
    assert found, report["unexplained_by_kind"]
    ours = [
        f
        for f in found
        if f["session_id"] == stream["session_id"] and f["producer_id"] == stream["producer_id"]
    ]
    assert ours, found
    if expect == "lost":
        assert ours[0]["positions"] == [position]
        assert report["lost"] == 1
    else:
        assert any(f["position"] == named for f in ours), ours


def _edited(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return (
            value + "x"
            if len(value) != 64
            else ("1" + value[1:] if value[0] != "1" else "2" + value[1:])
        )
    if isinstance(value, list):
        return [*value, "extra"]
    return value.replace(year=value.year + 1)  # a datetime


@pytest.mark.parametrize("kind", ["removed", "inserted", "swapped", "edited"])
def test_verify_exits_non_zero_on_a_tampered_copy_topic(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, _, messages = published
    copy = list(messages)
    i = chained_non_tail(messages)[len(chained_non_tail(messages)) // 2]
    event = dict(DECODE(copy[i].value).event)
    if kind == "removed":
        del copy[i]
    elif kind == "inserted":
        copy.insert(i + 1, replace(copy[i], value=ENCODE_V3({**event, "event_id": "forged"})))
    elif kind == "swapped":
        j = next_in_stream(copy, i)
        copy[i], copy[j] = copy[j], copy[i]
    else:
        copy[i] = replace(copy[i], value=ENCODE_V3({**event, "turn": event["turn"] + 1}))
    target = fresh_prefix(settings)
    copy_to(target, copy)
    code, report = run_cli(target, monkeypatch, capsys)
    assert code == 1
    expected = {
        "removed": "lost",
        "inserted": "position_reused",
        "swapped": "late_arrival",
        "edited": "chain_break",
    }[kind]
    assert expected in report["unexplained_by_kind"], report["unexplained_by_kind"]
    assert any(f.get("session_id") == event["session_id"] for f in report["unexplained"])


def test_what_the_chain_cannot_show_a_truncated_tail_passes(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
) -> None:
    # Documented in the README: the last events of a stream can be cut off unseen
    # (nothing follows them); keep a head hash from an earlier verify to notice.
    _, _, messages = published
    last: dict[tuple[str, str], int] = {}
    for i, m in enumerate(messages):
        event = DECODE(m.value).event
        if event["producer_id"]:
            last[stream_of(event)] = i
    cut = set(list(last.values())[:3])
    report = report_of([m for i, m in enumerate(messages) if i not in cut])
    assert report["verdict"] == "ok"
    assert report["counts"]["turns"] == len(messages) - 3


def test_a_message_keyed_with_something_else_is_a_key_mismatch(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
) -> None:
    _, _, messages = published
    copy = [replace(messages[0], key=b"not-the-session"), *messages[1:]]
    report = report_of(copy)
    assert [f["offset"] for f in findings(report, "key_mismatch")] == [0]


def test_a_log_sink_file_missing_a_turn_disagrees(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, _, messages = published
    ids = [DECODE(m.value).event["event_id"] for m in messages]
    log = tmp_path / "turns.jsonl"
    # Every turn once, one twice (a redelivery), one not at all.
    log.write_text(
        "".join(json.dumps({"event": "turn", "event_id": e}) + "\n" for e in [*ids[1:], ids[5]])
    )
    code, report = run_cli(settings, monkeypatch, capsys, "--log-file", str(log))
    assert code == 1
    assert report["log_sink"]["not_logged_examples"] == [ids[0]]
    assert report["log_sink"]["repeated_lines"] == 1
    assert report["not_logged"] == 1


def test_a_time_range_holds_exactly_the_turns_published_in_it(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    publish(kafka_settings, tmp_path / "a", seed=1, events=100)
    time.sleep(1.5)
    since = datetime.now(UTC)
    middle = publish(kafka_settings, tmp_path / "b", seed=2, events=150)
    time.sleep(1.5)
    until = datetime.now(UTC)
    publish(kafka_settings, tmp_path / "c", seed=3, events=50)
    code, report = run_cli(
        kafka_settings, monkeypatch, capsys, "--from", since.isoformat(), "--to", until.isoformat()
    )
    assert code == 0, report["unexplained"]
    assert report["counts"]["turns"] == middle.events
    assert report["counts"]["refused"] == middle.refused
    assert report["range"]["from_log_start"] is False


def test_a_terminal_gets_a_summary_and_the_verdict(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, truth, _ = published
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings.topics.prefix)
    capsys.readouterr()
    assert main(["verify"]) == 0
    out = capsys.readouterr().out
    assert f"turns {truth.events} " in out
    assert "the whole retained stream" in out
    assert out.rstrip().endswith("verify: every turn accounted for")


def test_heads_of_an_earlier_report_catch_a_truncated_or_rewritten_tail(
    published: tuple[KafkaSettings, GroundTruth, list[Stored]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, _, messages = published
    code, earlier = run_cli(settings, monkeypatch, capsys)
    assert code == 0
    heads = earlier["streams"]["heads"]
    assert len(heads) == earlier["streams"]["chained"]
    saved = tmp_path / "earlier.json"
    saved.write_text(json.dumps(earlier))
    # The same stream again, against its own heads: nothing changed.
    code, again = run_cli(settings, monkeypatch, capsys, "--heads", str(saved))
    assert code == 0, again["unexplained"]
    assert again["streams"]["anchors_checked"] == len(heads)
    # A copy with one stream's last event cut off and another's last event edited.
    last: dict[tuple[str, str], int] = {}
    for i, m in enumerate(messages):
        event = DECODE(m.value).event
        if event["producer_id"]:
            last[stream_of(event)] = i
    (cut_stream, cut), (edit_stream, edit) = list(last.items())[:2]
    edited = dict(DECODE(messages[edit].value).event)
    edited["surface"] += " (edited)"
    copy = [
        replace(m, value=ENCODE_V3(edited)) if i == edit else m
        for i, m in enumerate(messages)
        if i != cut
    ]
    target = fresh_prefix(settings)
    copy_to(target, copy)
    code, report = run_cli(target, monkeypatch, capsys, "--heads", str(saved))
    assert code == 1
    kinds = {(f["kind"], f["session_id"], f["producer_id"]) for f in report["unexplained"]}
    assert ("truncated", *cut_stream) in kinds
    assert ("rewritten", *edit_stream) in kinds
