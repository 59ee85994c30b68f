"""One fixed, broker-free range with every kind of finding, for the report's shape:
the report of it (JSON and terminal text) is kept in ``golden/`` as verify wrote it
before the package split, and must stay byte for byte the same."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest

from tests.support.events import breaking_events, encode, turn
from turnaudit.identity import TurnStamper, chain_hash
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

GOLDEN_START = datetime(2026, 11, 1, tzinfo=UTC)

DECODE = TurnEventDeserializer(shipped_catalog())
ENCODE_V3 = SingleObjectSerializer(shipped_catalog().version(3))
GOLDEN = Path(__file__).parent / "golden"


@dataclass(frozen=True)
class Stamped:
    key: bytes
    value: bytes
    event: dict[str, Any]


def stamped_events(count: int, *, seed: int, producers: int, sessions: int) -> list[Stamped]:
    """Like ``tests.support.identity_streams`` but reproducible: fixed producer and event ids."""
    stampers = []
    for n in range(producers):
        ids = iter(range(10**6))
        stampers.append(
            TurnStamper(
                producer_id=f"producer-{n}",
                id_factory=lambda n=n, ids=ids: f"event-{n}-{next(ids)}",
            )
        )
    # A fixed clock: the golden report holds the turns' hashes, occurred_at included.
    sim = TurnRuntimeSimulator(
        seed, schema_versions=(3,), concurrent_sessions=sessions, start=GOLDEN_START
    )
    out = []
    for i, event in enumerate(sim.events(count)):
        stamper = stampers[i % producers]
        stamper.stamp(event)
        value = ENCODE_V3(event)
        stamper.commit(event, value)
        out.append(Stamped(event["session_id"].encode(), value, dict(event)))
    return out


def same_stream_pair(stamped: list[Stamped], after: int) -> tuple[int, int]:
    """Two positions of one stream, both past ``after``."""
    first: dict[tuple[str, str], int] = {}
    for i, s in enumerate(stamped[after:], after):
        stream = (s.event["session_id"], s.event["producer_id"])
        if stream in first:
            return first[stream], i
        first[stream] = i
    raise AssertionError("no stream with two turns")


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int


def messages() -> list[Message]:
    """60 v3 turns of 2 producers, 2 v2 turns, then tampered: one turn lost, one
    duplicated, one redelivered, two swapped, one edited, one inserted, one
    re-sent with other content, one mis-keyed, one undecodable message, two
    contract breaches."""
    stamped = stamped_events(60, seed=5, producers=2, sessions=4)
    rows: list[tuple[bytes | None, bytes]] = [(s.key, s.value) for s in stamped]
    for n in range(2):
        legacy = turn("legacy-session", n, version=2)
        rows.append((b"legacy-session", encode(legacy)))
    lost = 10
    edited = dict(stamped[20].event)
    edited["surface"] += " (edited)"
    rows[20] = (rows[20][0], ENCODE_V3(edited))
    i, j = same_stream_pair(stamped, 30)
    rows[i], rows[j] = rows[j], rows[i]
    forged = {**stamped[40].event, "event_id": "forged-event"}
    changed = {**stamped[41].event, "input_tokens": ["other"]}
    rows[44] = (b"not-the-session", rows[44][1])
    tail: list[tuple[bytes | None, bytes]] = [
        rows[5],  # a duplicate copy
        (rows[40][0], ENCODE_V3(forged)),  # a new event id at a taken position
        (rows[41][0], ENCODE_V3(changed)),  # an event id again, other content
        (b"x", b"not avro at all"),
    ]
    for breach in list(breaking_events().values())[:2]:  # contract breaches, still turns
        tail.append((breach["session_id"].encode(), encode(breach)))
    del rows[lost]
    out = []
    for i, (key, value) in enumerate(rows + tail):
        out.append(Message(i % 3, i // 3, key, value, 1_790_000_000_000 + 1000 * i))
    return out


def anchors() -> dict[tuple[str, str], tuple[int, str]]:
    """Heads of an 'earlier report': one absent stream, one reached further, one rewritten."""
    stamped = stamped_events(60, seed=5, producers=2, sessions=4)
    first = stamped[0].event
    second = stamped[1].event
    return {
        ("gone-session", "f" * 32): (3, "0" * 64),
        (first["session_id"], first["producer_id"]): (10_000, "1" * 64),
        (second["session_id"], second["producer_id"]): (
            second["sequence"],
            chain_hash(b"something else"),
        ),
    }


def metrics_text(by_pack: Mapping[str, Mapping[str, int]]) -> str:
    """A verdict-metrics page with these figures (turns, refused, hedged, stub) per pack."""
    registry = CollectorRegistry()
    for figure, name in (
        ("turns", "turnaudit_turns"),
        ("refused", "turnaudit_refused_turns"),
        ("hedged", "turnaudit_hedged_turns"),
        ("stub", "turnaudit_stub_turns"),
    ):
        counter = Counter(name, "x", ["pack"], registry=registry)
        for pack, figures in by_pack.items():
            counter.labels(pack=pack).inc(figures[figure])
    return generate_latest(registry).decode()


def log_file(path: Path, event_ids: list[str]) -> Path:
    """Every turn but the first, the second twice, and a line of another range."""
    lines = [{"event": "turn", "event_id": e} for e in [*event_ids[1:], event_ids[1], "other"]]
    lines.append({"event": "something else", "event_id": "x"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "not json\n")
    return path


def dump(document: Any) -> str:
    """As ``verify --json`` prints it."""
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


Feed = Callable[[int, int, bytes | None, bytes | None, int | None], None]


def feed_all(feed: Feed) -> None:
    ms = messages()
    for m in ms:
        feed(m.partition, m.offset, m.key, m.value, m.timestamp)
    again = ms[7]  # a redelivery: the same message at the same offset
    feed(again.partition, again.offset, again.key, again.value, again.timestamp)
