"""Erasure by time range (``turnaudit erase --from T --to T``): over random sessions, turn
times and ranges, under both key periods, the data keys a range erasure destroys leave
exactly the turns the documented rule names sealed (``key_erased``), and every other turn
opening: a day key goes when its UTC day overlaps the range, a session key when its
session's first sealed turn lies in it. The erasure records one line per session erased."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.sealing.support import KeyTopic, keyring, sealed_copy, v5_turn
from turnaudit.errors import BrokerError
from turnaudit.events import TurnEvent
from turnaudit.sealing import (
    DataKeyRecord,
    FileKeyring,
    Opened,
    Sealed,
    SessionKeys,
    WrappedKey,
    key_topic,
)
from turnaudit.sealing.data_keys import DAY_MS, KeyPeriod
from turnaudit.settings import KafkaSettings

# A turn: which of 5 sessions, which of 2 publisher processes sealed it (a session may
# move between them), and when (up to 4 days after the run's start).
turn_times = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 4 * DAY_MS), st.integers(0, 1)),
    min_size=1,
    max_size=40,
)


def published(
    period: KeyPeriod, start: int, turns: list[tuple[int, int, int]], provider: FileKeyring
) -> tuple[KeyTopic, list[tuple[TurnEvent, int]]]:
    """The turns sealed in time order by their publishers (each clock at the turn's time),
    every data key record on one key topic."""
    topic = KeyTopic()
    now = [0]
    publishers = [
        SessionKeys(provider, topic.store, clock_ms=lambda: now[0], period=period) for _ in range(2)
    ]
    sealed = []
    for sequence, (session, at, publisher) in enumerate(sorted(turns, key=lambda t: t[1])):
        now[0] = start + at
        event = v5_turn(
            f"s-{session}", sequence, producer_id=f"p-{publisher}", surface=f"said {sequence}"
        )
        sealed.append((sealed_copy(publishers[publisher], event), now[0]))
    return topic, sealed


def erased_by_the_rule(
    period: KeyPeriod, sealed: list[tuple[TurnEvent, int]], from_ms: int, to_ms: int
) -> set[str]:
    """The event ids the documented rule erases, from the turns' own times alone: a day
    that overlaps the range, or a session whose first turn (in its publisher) lies in it."""
    first_turn: dict[tuple[str, str], int] = {}
    for event, at in sealed:
        first_turn.setdefault((event["producer_id"], event["session_id"]), at)
    erased = set()
    for event, at in sealed:
        if period == "day":
            day_start = at - at % DAY_MS
            hit = day_start < to_ms and from_ms < day_start + DAY_MS
        else:
            began = first_turn[(event["producer_id"], event["session_id"])]
            hit = from_ms <= began < to_ms
        if hit:
            erased.add(event["event_id"])
    return erased


@pytest.mark.parametrize("period", ["session", "day"])
@settings(max_examples=80, deadline=None)
@given(
    turns=turn_times,
    start=st.integers(0, 10**13),
    range_start=st.integers(-DAY_MS, 5 * DAY_MS),
    range_length=st.integers(1, 3 * DAY_MS),
)
def test_erasing_any_range_leaves_exactly_the_turns_outside_it_readable(
    period: KeyPeriod,
    turns: list[tuple[int, int, int]],
    start: int,
    range_start: int,
    range_length: int,
) -> None:
    provider = keyring("kek-1")
    topic, sealed = published(period, start, turns, provider)
    from_ms = start + range_start
    to_ms = from_ms + range_length
    for record in topic.directory(None).records_within(from_ms, to_ms):
        topic.tombstone(record.data_key_id)
    expected = erased_by_the_rule(period, sealed, from_ms, to_ms)
    directory = topic.directory(provider)
    for event, _ in sealed:
        state = directory.open_in_place(event)
        if event["event_id"] in expected:
            assert state == Sealed("key_erased")
        else:
            assert isinstance(state, Opened)
            assert event["surface"] == f"said {event['sequence']}"


def _record(created_at_ms: int, period: KeyPeriod = "session") -> DataKeyRecord:
    return DataKeyRecord(
        "d" * 32, "s", WrappedKey("kek-1", b"n" * 12, b"w" * 48), created_at_ms, period
    )


@pytest.mark.parametrize("period", ["session", "day"])
@given(created=st.integers(0, 10**13))
def test_a_key_record_keeps_its_period_through_the_topic(period: KeyPeriod, created: int) -> None:
    record = _record(created, period)
    assert DataKeyRecord.decode(record.encode()) == record


@pytest.mark.parametrize("stored", [None, "week", 7])
def test_a_record_without_a_known_period_is_erased_by_its_creation_time(stored: Any) -> None:
    raw = json.loads(_record(5 * DAY_MS + 10).encode())
    if stored is None:
        del raw["period"]  # written before the field was kept
    else:
        raw["period"] = stored
    record = DataKeyRecord.decode(json.dumps(raw).encode())
    assert record.period == "session"
    assert record.sealed_within(5 * DAY_MS + 10, 5 * DAY_MS + 11)
    assert not record.sealed_within(5 * DAY_MS, 5 * DAY_MS + 10)  # same day, before it


class _Producer:
    """What ``KafkaProducer.reliable(...).open()`` gives, recording what is produced;
    ``undelivered`` messages are left unacknowledged by ``flush``."""

    def __init__(self, undelivered: int) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.failed = 0
        self._undelivered = undelivered

    def open(self) -> _Producer:
        return self

    def produce(self, topic: str, value: bytes | None, key: bytes) -> None:
        self.sent.append((topic, value, key))

    def flush(self, timeout: float) -> int:
        return self._undelivered


def _erase_with(
    monkeypatch: pytest.MonkeyPatch, topic: KeyTopic, from_ms: int, to_ms: int, undelivered: int = 0
) -> tuple[_Producer, list[key_topic.ErasureRecord]]:
    producer = _Producer(undelivered)
    monkeypatch.setattr(key_topic, "load_directory", lambda *_a, **_k: topic.directory(None))
    monkeypatch.setattr(key_topic.KafkaProducer, "reliable", lambda _settings: producer)
    records = key_topic.erase_range(KafkaSettings(), from_ms, to_ms, erased_by="dpo", reason="r")
    return producer, records


@settings(max_examples=40, deadline=None)
@given(turns=turn_times, range_start=st.integers(0, 4 * DAY_MS), length=st.integers(1, DAY_MS))
def test_a_range_erasure_tombstones_exactly_its_keys_and_records_each_session_once(
    turns: list[tuple[int, int, int]], range_start: int, length: int
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        topic, _ = published("day", 0, turns, keyring("kek-1"))
        within = topic.directory(None).records_within(range_start, range_start + length)
        producer, records = _erase_with(monkeypatch, topic, range_start, range_start + length)
    names = KafkaSettings().topics
    tombstones = {k.decode() for t, v, k in producer.sent if t == names.surface_keys}
    assert all(v is None for t, v, _ in producer.sent if t == names.surface_keys)
    assert tombstones == {r.data_key_id for r in within}
    on_record = [json.loads(v or b"") for t, v, _ in producer.sent if t == names.erasures]
    sessions = {r.session_id for r in within}
    assert [r["session_id"] for r in on_record] == (sorted(sessions) or [""])
    for line in on_record:
        assert (line["range_from_ms"], line["range_to_ms"]) == (range_start, range_start + length)
        assert (line["erased_by"], line["reason"]) == ("dpo", "r")
        assert set(line["data_key_ids"]) == {
            r.data_key_id for r in within if r.session_id == line["session_id"]
        }
    assert [r.session_id for r in records] == [r["session_id"] for r in on_record]


def test_a_range_erasure_the_broker_does_not_acknowledge_fails_saying_run_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, _ = published("session", 0, [(0, 10, 0)], keyring("kek-1"))
    with pytest.raises(BrokerError, match="run it again"):
        _erase_with(monkeypatch, topic, 0, DAY_MS, undelivered=1)


def test_an_empty_range_is_refused_before_the_broker_is_asked() -> None:
    with pytest.raises(ValueError, match="empty range"):
        key_topic.erase_range(KafkaSettings(), 10, 10, erased_by="dpo")
