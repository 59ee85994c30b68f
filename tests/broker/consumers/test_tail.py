"""``turnaudit tail``: one human-readable line per turn, from now or from a time, filtered."""

from __future__ import annotations

import io
import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tests.support.events import encode, turn
from tests.support.streams import produce_raw, wait_for
from turnaudit.consumers.tail import TailFilter, tail_turns
from turnaudit.kafka.schema_registry import ConfluentSerializer, registry_client
from turnaudit.local_registry import LocalSchemaRegistry
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


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


def test_tail_reads_both_framings_side_by_side(
    kafka_settings: KafkaSettings, schema_registry: LocalSchemaRegistry
) -> None:
    # With a registry configured, tail decodes Confluent-framed events (the
    # shared decoder) beside single-object ones.
    settings = replace(kafka_settings, schema_registry_url=schema_registry.url)
    registry = registry_client(schema_registry.url)
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
