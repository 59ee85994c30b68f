"""A data key record is never less durable than a turn sealed under it.

A sealed publisher against a broker that never answers (a port that accepts the TCP
connection and reads nothing: a hung broker) keeps everything in librdkafka's memory,
the spool or the journal. What is on disk is what survives a killed process: at every
moment tested, each sealed turn on disk has its data key record on disk ahead of it, and
with only what is on disk and the keyring, every such turn opens.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.broker import hung_broker_settings
from tests.unit.sealing.support import keyring_text
from turnaudit.errors import EventRefusedError, SpoolWriteError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.producers.journal_records import recover
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.producers.spool import DiskSpool
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, KeyDirectory, Opened
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

TURNS = 24
SESSIONS = 4


@pytest.fixture
def hung_broker() -> Iterator[KafkaSettings]:
    with hung_broker_settings() as settings:
        yield settings


@pytest.fixture
def kek_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "surface-keys.toml"
    path.write_text(keyring_text({"kek-1": os.urandom(32)}, "kek-1"))
    path.chmod(0o600)
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(path))
    return path


def sealed_turns(seed: int) -> Iterator[OutgoingTurnEvent]:
    sim = TurnRuntimeSimulator(seed, schema_versions=(5,), concurrent_sessions=SESSIONS)
    return iter(sim.events(TURNS))


def on_disk(messages: list[tuple[str, bytes, bytes]], keys_topic: str) -> tuple[int, int]:
    """Checks what a killed publisher leaves: every sealed turn has its data key record
    ahead of it, and opens with those records and the keyring alone. (turns, opened)."""
    decode = TurnEventDeserializer(shipped_catalog())
    seen_keys: set[bytes] = set()
    directory = KeyDirectory(FileKeyring.load(Path(os.environ[SURFACE_KEYRING_ENV])))
    turns = opened = 0
    for topic, key, value in messages:
        if topic == keys_topic:
            seen_keys.add(key)
            directory.apply(key, value)
            continue
        event = decode(value).event
        sealed = event.get("sealed")
        assert sealed is not None, "a turn on disk in the clear"
        assert sealed["data_key_id"].encode() in seen_keys, "a turn on disk ahead of its key"
        turns += 1
        opened += isinstance(directory.open_in_place(event), Opened)
    return turns, opened


def spooled(spool: DiskSpool) -> list[tuple[str, bytes, bytes]]:
    return [(r.message.topic, r.message.key, r.message.value) for r in spool.read(limit=10_000)]


@pytest.mark.parametrize("switch_at", [0, 1, 3, 10, TURNS - 1, TURNS])
def test_each_spooled_sealed_turn_has_its_key_record_on_disk_ahead_whenever_the_route_switches(
    hung_broker: KafkaSettings, kek_file: Path, tmp_path: Path, switch_at: int
) -> None:
    """The first ``switch_at`` turns (and their sessions' key records) stay in librdkafka's
    memory; then the route turns to the spool (every broker reported down) and
    later turns of the same sessions are spooled: their key records, still only in memory,
    are spooled again first. Read as a killed process would leave it, then after close()."""
    publisher = TurnEventPublisher(
        hung_broker, spool_dir=tmp_path / "spool", registry=CollectorRegistry(), max_unacked_s=0
    )
    keys_topic = hung_broker.topics.surface_keys
    for i, event in enumerate(sealed_turns(seed=switch_at)):
        if i == switch_at:
            with publisher._ledger.lock:
                publisher._route.brokers_down()  # as librdkafka reports it: spool, probe first
        publisher.publish(event)
    turns, opened = on_disk(spooled(publisher._failover.spool), keys_topic)
    assert turns == opened == TURNS - switch_at  # the killed process: what is on disk opens
    publisher.close(timeout=0.5)  # what librdkafka held goes in front of the spool
    spool = DiskSpool(tmp_path / "spool")
    try:
        assert on_disk(spooled(spool), keys_topic) == (TURNS, TURNS)
    finally:
        spool.close()


def test_in_journal_mode_each_sealed_turn_is_journaled_behind_its_key_record(
    hung_broker: KafkaSettings, kek_file: Path, tmp_path: Path
) -> None:
    """Journal mode: a turn is fsynced before publish() returns; its key record is in the
    same or an earlier group commit, so a crash's recovery finds both (journal order)."""
    publisher = TurnEventPublisher(
        hung_broker,
        spool_dir=tmp_path / "spool",
        registry=CollectorRegistry(),
        max_unacked_s=0,
        journal=True,
    )
    for event in sealed_turns(seed=7):
        publisher.publish(event)
    entries, files = recover(tmp_path / "spool" / "journal")  # what a crash leaves
    assert files
    journaled = [(e.topic, e.key, e.value) for e in entries]
    assert on_disk(journaled, hung_broker.topics.surface_keys) == (TURNS, TURNS)
    publisher.close(timeout=0.5)


def test_a_key_record_no_disk_takes_refuses_the_turn_without_using_its_position(
    hung_broker: KafkaSettings, kek_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While spooling, a spool that refuses the key record refuses the turn (no stream
    position used up: the session's next turn takes it) rather than seal it under a key
    kept nowhere; the next turn gets a new key, whose record is kept."""
    registry = CollectorRegistry()
    publisher = TurnEventPublisher(
        hung_broker, spool_dir=tmp_path / "spool", registry=registry, max_unacked_s=0
    )
    with publisher._ledger.lock:
        publisher._route.brokers_down()  # as librdkafka reports it: spool, probe first
    spool = publisher._failover.spool
    real_append = spool.append
    keys_topic = hung_broker.topics.surface_keys
    failing = {"on": True}

    def append(topic: str, key: bytes, value: bytes, headers: object = None) -> None:
        if topic == keys_topic and failing["on"]:
            raise SpoolWriteError("no space left on device")
        real_append(topic, key, value, headers)  # type: ignore[arg-type]  # the spool's own type

    monkeypatch.setattr(spool, "append", append)
    first, second = list(sealed_turns(seed=3))[:2]
    with pytest.raises(EventRefusedError) as refused:
        publisher.publish(first)
    assert refused.value.reason == "disk_error"
    assert refused.value.sequence == -1
    failing["on"] = False
    publisher.publish(first)
    publisher.publish(second)
    assert on_disk(spooled(spool), keys_topic) == (2, 2)
    decode = TurnEventDeserializer(shipped_catalog())
    first_on_disk = next(decode(v).event for t, _, v in spooled(spool) if t != keys_topic)
    assert first_on_disk["sequence"] == 0  # the refused attempt used no position
    assert publisher.refused_by_reason() == {"disk_error": 1}
    publisher.close(timeout=0.5)


def test_when_the_journals_disk_fails_a_waiting_key_record_is_handed_over_ahead_of_its_turn(
    hung_broker: KafkaSettings, kek_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Journal mode, the journal's write failing (EIO): each turn goes on without it, and
    the key record appended ahead of it is handed over first (here: to the spool), never
    left behind in the failed journal."""
    publisher = TurnEventPublisher(
        hung_broker,
        spool_dir=tmp_path / "spool",
        registry=CollectorRegistry(),
        max_unacked_s=0,
        journal=True,
    )
    journal = publisher._journal
    assert journal is not None

    def failing_write(*_args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(journal.journal, "_write", failing_write)
    with publisher._ledger.lock:
        publisher._route.brokers_down()  # as librdkafka reports it: spool, probe first
    for event in sealed_turns(seed=13):
        publisher.publish(event)
    assert on_disk(spooled(publisher._failover.spool), hung_broker.topics.surface_keys) == (
        TURNS,
        TURNS,
    )
    publisher.close(timeout=0.5)
