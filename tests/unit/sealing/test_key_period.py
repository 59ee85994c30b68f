"""Data keys per session, or per session and UTC day (``TURNAUDIT_SURFACE_KEY_PERIOD``).

Over random runs of turns across sessions and days: one data key per session (``session``)
or per session and day (``day``), each one's record stored before the first turn sealed
with it, and every turn opening with those records alone. A publisher's daily keys take
the turns' path like the first one: spooled ahead of the turns sealed under them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.unit.sealing.support import KeyTopic, keyring, v5_turn
from tests.unit.sealing.test_key_record_durability import (  # the same hung broker and checks
    hung_broker,
    kek_file,
    on_disk,
    sealed_turns,
    spooled,
)
from turnaudit.errors import ConfigurationError
from turnaudit.events import OutgoingTurnEvent, TurnEvent
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.spool import DiskSpool
from turnaudit.sealing import DataKeyRecord, Opened, SessionKeys
from turnaudit.sealing.data_keys import DAY_MS, KEY_PERIOD_ENV, KeyPeriod, key_period_from_env
from turnaudit.settings import KafkaSettings

__all__ = ["hung_broker", "kek_file"]  # fixtures, used by name

# A step: which of 4 sessions publishes, and how far the clock moved before it (up to 2 days).
steps = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2 * DAY_MS)), min_size=1, max_size=60)


@pytest.mark.parametrize("period", ["session", "day"])
@settings(max_examples=60, deadline=None)
@given(run=steps, start=st.integers(0, 10**13))
def test_one_data_key_per_session_or_per_session_and_day_each_stored_before_its_first_turn(
    period: KeyPeriod, run: list[tuple[int, int]], start: int
) -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    log: list[tuple[str, str]] = []  # ("record" | "turn", data key id), in order
    now = [start]

    def store(record: DataKeyRecord) -> None:
        log.append(("record", record.data_key_id))
        topic.store(record)

    keys = SessionKeys(provider, store, clock_ms=lambda: now[0], period=period)
    sealed: list[TurnEvent] = []
    expected_keys: dict[tuple[str, int], str] = {}  # (session, day or 0) -> its data key
    for position, (session_index, advance) in enumerate(run):
        now[0] += advance
        session = f"s-{session_index}"
        event = v5_turn(session, position, surface=f"turn {position}")
        keys.seal(cast(OutgoingTurnEvent, event))
        data_key_id = event["sealed"]["data_key_id"]
        log.append(("turn", data_key_id))
        bucket = (session, now[0] // DAY_MS if period == "day" else 0)
        assert expected_keys.setdefault(bucket, data_key_id) == data_key_id
        sealed.append(cast(TurnEvent, event))
    assert len({k for _, k in log}) == len(expected_keys) == keys.made
    stored: set[str] = set()
    for kind, data_key_id in log:
        if kind == "record":
            stored.add(data_key_id)
        else:
            assert data_key_id in stored  # never a turn ahead of its key's record
    directory = topic.directory(provider)
    for position, event in enumerate(sealed):
        state = directory.open_in_place(copy.deepcopy(event))
        assert isinstance(state, Opened)
        assert state.surfaces.surface == f"turn {position}"


@pytest.mark.parametrize(
    ("raw", "period"),
    [("", "session"), ("session", "session"), ("day", "day"), (" DAY ", "day")],
)
def test_the_key_period_setting_reads_session_or_day(raw: str, period: str) -> None:
    assert key_period_from_env({KEY_PERIOD_ENV: raw}) == period


@pytest.mark.parametrize("raw", ["week", "1", "days", "session,day"])
def test_any_other_key_period_is_one_line_naming_the_setting(raw: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        key_period_from_env({KEY_PERIOD_ENV: raw})
    assert "\n" not in str(raised.value)
    assert KEY_PERIOD_ENV in str(raised.value)


def test_a_publishers_next_days_keys_are_spooled_ahead_of_the_turns_sealed_under_them(
    hung_broker: KafkaSettings, kek_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Day one's turns stay in librdkafka's memory; the route turns to the spool and the
    day changes: every session's new key record goes to disk ahead of its turns, and what
    is on disk (a killed process) opens; after close, everything does."""
    monkeypatch.setenv(KEY_PERIOD_ENV, "day")
    publisher = TurnEventPublisher(
        hung_broker, spool_dir=tmp_path / "spool", registry=CollectorRegistry(), max_unacked_s=0
    )
    keys = publisher._sealing.keys
    assert keys is not None
    now = [5 * DAY_MS + DAY_MS // 2]
    keys._clock_ms = lambda: now[0]  # the publisher's clock, moved by the test
    turns = list(sealed_turns(seed=11))
    half = len(turns) // 2
    for event in turns[:half]:
        publisher.publish(event)
    with publisher._ledger.lock:
        publisher._route.brokers_down()  # as librdkafka reports it: spool, probe first
    now[0] += DAY_MS  # the next day
    for event in turns[half:]:
        publisher.publish(event)
    keys_topic = hung_broker.topics.surface_keys
    assert on_disk(spooled(publisher._failover.spool), keys_topic) == (
        len(turns) - half,
        len(turns) - half,
    )
    sessions = {e["session_id"] for e in turns}
    assert keys.made > len(sessions)  # the day changed: new keys
    publisher.close(timeout=0.5)  # what librdkafka held goes in front of the spool
    spool = DiskSpool(tmp_path / "spool")
    try:
        assert on_disk(spooled(spool), keys_topic) == (len(turns), len(turns))
    finally:
        spool.close()
