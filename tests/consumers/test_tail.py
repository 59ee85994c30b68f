"""``turnaudit tail``: one human-readable line per turn, from now or from a time, filtered."""

from __future__ import annotations

import io
import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tests.consumers.events import encode, turn
from tests.consumers.streams import produce_raw, wait_for
from turnaudit.consumers.tail import TailFilter, format_turn, tail_turns
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import (
    ConfluentSerializer,
    TurnEventDeserializer,
    registry_client,
)
from turnaudit.settings import KafkaSettings
from turnaudit.verdicts import ActionAssessment, RiskTier, SafetyVerdict, Verdict

DECODE = TurnEventDeserializer(shipped_catalog())


def test_a_refused_turn_with_an_action_reads_as_one_line() -> None:
    event = turn(
        "s-1",
        4,
        refusal_emitted=True,
        surface="[refusal] no",
        surface_before_hedge="[refusal] no",
        safety_verdict=SafetyVerdict(False, ("weapons",)),
        action=ActionAssessment.from_critic("deploy", Verdict.VOID, RiskTier.RED, True),
    )
    event["occurred_at"] = int(
        datetime(2026, 11, 1, 12, 0, 1, 250000, tzinfo=UTC).timestamp() * 1000
    )
    line = format_turn(DECODE(encode(event)), 1, 42, show_verdicts=True)
    assert line == (
        "2026-11-01T12:00:01.250Z s-1#4 seq=4 MAIN medical/triage v2 | REFUSED safety=FAIL "
        "boundaries=weapons ethics=pass identity=0.80 action DOMAIN_VOID (risk VOID, tier RED, "
        "execution SEAL, human decision) [p1@42]"
    )
    assert "\n" not in line


def test_without_show_verdicts_the_line_names_the_turn_only() -> None:
    event = turn("s-2", 0, surface="I may be wrong, but ok", surface_before_hedge="ok")
    line = format_turn(DECODE(encode(event)), 0, 3, show_verdicts=False)
    assert line.endswith("s-2#0 seq=0 MAIN medical/triage v2 [p0@3]")
    assert "HEDGED" in format_turn(DECODE(encode(event)), 0, 3, show_verdicts=True)


def run_tail(
    settings: KafkaSettings, **options: object
) -> tuple[io.StringIO, threading.Event, threading.Thread, threading.Event]:
    out, stop, ready = io.StringIO(), threading.Event(), threading.Event()
    thread = threading.Thread(
        target=tail_turns,
        args=(settings, out),
        kwargs={**options, "stop": stop, "on_ready": ready.set},
    )
    thread.start()
    return out, stop, thread, ready


@pytest.mark.broker
def test_from_now_shows_only_new_turns_of_the_chosen_pack(kafka_settings: KafkaSettings) -> None:
    produce_raw(kafka_settings, [(b"old", encode(turn("old", 0)))])
    out, stop, thread, ready = run_tail(kafka_settings, filters=TailFilter(pack="finance"))
    assert ready.wait(30)
    new = [turn(f"new-{n}", 0, pack="finance" if n % 2 else "medical") for n in range(20)]
    produce_raw(
        kafka_settings,
        [(e["session_id"].encode(), encode(e)) for e in new] + [(b"junk", b"\xffnot avro")],
    )
    assert wait_for(lambda: len(out.getvalue().splitlines()) >= 11), out.getvalue()
    stop.set()
    thread.join(30)
    lines = out.getvalue().splitlines()
    turns = [line for line in lines if not line.startswith("!")]
    assert sorted(line.split()[1] for line in turns) == sorted(
        f"{e['session_id']}#0" for e in new if e["pack_id"] == "finance"
    )
    assert all(" finance/" in line for line in turns)
    assert sum(line.startswith("! undecodable message") for line in lines) == 1
    assert len(lines) == 11


@pytest.mark.broker
def test_from_a_time_replays_and_filters_by_session(kafka_settings: KafkaSettings) -> None:
    events = [turn(f"s-{n % 3}", n // 3) for n in range(30)]
    produce_raw(kafka_settings, [(e["session_id"].encode(), encode(e)) for e in events])
    out = io.StringIO()
    printed = tail_turns(
        kafka_settings,
        out,
        since=datetime(2000, 1, 1, tzinfo=UTC),
        filters=TailFilter(session="s-1"),
        limit=10,
    )
    lines = out.getvalue().splitlines()
    assert printed == 10
    assert [line.split()[1] for line in lines] == [f"s-1#{n}" for n in range(10)]


@pytest.mark.broker
def test_tail_reads_both_framings_side_by_side(kafka_settings: KafkaSettings) -> None:
    # With a registry configured, tail decodes Confluent-framed events (the
    # shared decoder) beside single-object ones.
    settings = replace(kafka_settings, schema_registry_url="mock://tail-both-framings")
    registry = registry_client("mock://tail-both-framings")
    confluent = ConfluentSerializer(shipped_catalog().latest, registry).bind(
        settings.topics.turn_events
    )
    single, framed = turn("s-single", 0), turn("s-confluent", 0)
    produce_raw(
        settings,
        [(b"s-single", encode(single)), (b"s-confluent", confluent(framed))],
    )
    out = io.StringIO()
    printed = tail_turns(settings, out, since=datetime(2000, 1, 1, tzinfo=UTC), limit=2)
    assert printed == 2
    assert sorted(line.split()[1] for line in out.getvalue().splitlines()) == [
        "s-confluent#0",
        "s-single#0",
    ]
