"""The age bound: turns leave librdkafka's memory for the spool once the oldest
waited ``max_unacked_s``, against a hung broker (a port that accepts the TCP
connection and never answers: what a SIGSTOPped broker looks like), before
librdkafka declares any broker down."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import hung_broker_settings
from turnaudit.errors import ConfigurationError
from turnaudit.producers.accounting import Ledger
from turnaudit.producers.failover import Failover
from turnaudit.producers.producer_config import env_seconds
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.route import Route
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.producers.spool import DiskSpool
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings


@pytest.fixture
def hung_broker() -> Iterator[KafkaSettings]:
    with hung_broker_settings() as settings:
        yield settings


def test_an_old_unacknowledged_event_turns_the_route_to_the_spool() -> None:
    route = Route(spooling=False, probe_interval=1.0)
    route.unacked_too_old(10.0)
    assert route.spooling
    assert route.broker_down
    assert not route.probe_due(10.5)  # one interval before the first probe
    assert route.probe_due(11.0)


def test_the_ledger_ages_the_oldest_event_still_in_the_client() -> None:
    ledger = Ledger()
    assert ledger.oldest_unacked_age(100.0) == 0.0
    ledger.to_client()
    first = ledger.handed_at[0]
    ledger.to_client()
    assert ledger.oldest_unacked_age(first + 3.0) == pytest.approx(3.0)
    ledger.reported()
    ledger.reported()
    ledger.reported()  # one report too many never raises
    assert ledger.oldest_unacked_age(first + 3.0) == 0.0


def test_bad_age_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNAUDIT_MAX_UNACKED_S", "2.5")
    assert env_seconds("TURNAUDIT_MAX_UNACKED_S", 5.0) == 2.5
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("TURNAUDIT_MAX_UNACKED_S", bad)
        with pytest.raises(ConfigurationError, match="TURNAUDIT_MAX_UNACKED_S"):
            env_seconds("TURNAUDIT_MAX_UNACKED_S", 5.0)


def test_a_hung_broker_holds_at_most_the_age_bound_in_memory(
    tmp_path: Path, hung_broker: KafkaSettings
) -> None:
    publisher = TurnEventPublisher(
        hung_broker,
        spool_dir=tmp_path / "spool",
        probe_interval=60.0,
        max_unacked_s=0.5,
    )
    source = TurnRuntimeSimulator(5, concurrent_sessions=4).events(10_000)
    for _ in range(30):
        publisher.publish(next(source))
    assert publisher.stats().in_flight + publisher.stats().spooled == 30
    deadline = time.monotonic() + 20
    while publisher.stats().in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = publisher.stats()
    assert (stats.in_flight, stats.spooled, stats.delivered) == (0, 30, 0)
    assert stats.balanced
    assert publisher._route.spooling
    for _ in range(10):  # the route stays on the spool: nothing new in memory
        publisher.publish(next(source))
    stats = publisher.stats()
    assert (stats.in_flight, stats.spooled) == (0, 40)
    assert publisher._ledger.aged_out == 30
    publisher.close(timeout=0.5)
    assert publisher.stats().balanced
    spool = DiskSpool(tmp_path / "spool")
    decode = TurnEventDeserializer(shipped_catalog())
    per_session: dict[str, list[int]] = defaultdict(list)
    for record in spool.read(limit=100):
        event = decode(record.message.value).event
        per_session[event["session_id"]].append(event["sequence"])
    spool.close()
    assert sum(map(len, per_session.values())) == 40
    for session, sequences in per_session.items():
        assert sequences == list(range(len(sequences))), session  # in order per session


class EmptyClient:
    """librdkafka with nothing queued or in flight."""

    def queued(self) -> int:
        return 0

    def purge(self) -> None:
        raise AssertionError("nothing to purge")


def test_stale_hand_over_times_with_an_empty_client_never_turn_the_route(tmp_path: Path) -> None:
    """Reports and hand-overs do not pair up exactly (drained events are reported
    too): times left over while librdkafka holds nothing are dropped, not taken
    for a hung broker, which would spool every turn and never probe again."""
    ledger = Ledger()
    for _ in range(3):
        ledger.to_client()
    ledger.handed_at[0] -= 60.0  # an old hand-over whose report was paired with another
    failover = Failover(
        topic="u.turn-events",
        spool_dir=tmp_path,
        spool_max_bytes=1 << 20,
        ledger=ledger,
        probe_interval=1.0,
        delivered=lambda _: None,
        max_unacked_s=2.0,
    )
    for _ in range(5):
        failover._enforce_age_bound(EmptyClient())  # type: ignore[arg-type]  # a stand-in client
    assert not failover.route.spooling
    assert not failover.route.broker_down
    assert ledger.oldest_unacked_age(time.monotonic()) == 0.0
