"""Sealed turns on the real broker, read as a user reads them (the CLI, the environment's
keyring and surface policy), before and after an erasure.

A signed publisher with a keyring publishes v5 turns and one dead letter of the session
that is then erased. Before the erasure, ``replay`` writes every text out with the keyring
and placeholders without it, and the dead letter opens. After ``turnaudit erase
--session``, no reader recovers the session's texts: ``replay`` again, the dead letter's
bytes read with the keyring, and ``read_turn_events`` all show ``[sealed: key_erased]``
while the other sessions open; ``verify --require-signed`` still proves every stream
complete and signed. Last, ``turnaudit erase --from --to`` over the whole run erases
the rest, recorded once per session with its range.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from tests.support.verify_helpers import fresh_topics
from turnaudit.checkpoints import keyring_entry_toml
from turnaudit.cli import main
from turnaudit.events import OutgoingTurnEvent, TurnEvent
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.reading import Opened, Sealed, load_directory, read_turn_events
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, SealState, placeholder
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key

pytestmark = pytest.mark.broker

TURNS = 60
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
DEAD = "<planted dead letter>"


@dataclass(frozen=True)
class SealedStream:
    settings: KafkaSettings
    kek_file: Path
    signing_keyring: Path
    tokens: dict[str, list[str]]  # event id -> its input tokens as published
    sessions: dict[str, str]  # event id -> session
    erased: str  # the session erased (its dead letter made before)
    started: datetime


@pytest.fixture(scope="module")
def stream(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SealedStream:
    folder = tmp_path_factory.mktemp("sealed-replay")
    kek_file = folder / "surface-keys.toml"
    key = base64.b64encode(os.urandom(32)).decode()
    kek_file.write_text(f'active = "kek-1"\n[keys]\nkek-1 = "{key}"\n')
    kek_file.chmod(0o600)
    made = generate_keys(folder, "runtime-1")
    signing = load_signing_key(made.private_path, "runtime-1")
    signing_keyring = folder / "keyring.toml"
    signing_keyring.write_text(keyring_entry_toml("runtime-1", signing.public_pem(), LONG_AGO))
    settings = fresh_topics(kafka_bootstrap)
    started = datetime.now(UTC) - timedelta(seconds=1)
    publisher = TurnEventPublisher(
        settings,
        spool_dir=folder / "spool",
        registry=CollectorRegistry(),
        surface_keys=FileKeyring.load(kek_file),
        checkpoints=CheckpointSettings(signing, interval_s=0.05, max_turns=20),
    )
    tokens: dict[str, list[str]] = {}
    sessions: dict[str, str] = {}
    sim = TurnRuntimeSimulator(23, schema_versions=(5,), concurrent_sessions=4)
    for i, event in enumerate(sim.events(TURNS)):
        event["input_tokens"] = [*event["input_tokens"], f"<planted token {i}>"]
        event_id = publisher.publish(event)
        tokens[event_id] = list(event["input_tokens"])
        sessions[event_id] = event["session_id"]
        last = event
    dead = cast(OutgoingTurnEvent, {**last, "input_tokens": [DEAD], "surface": DEAD})
    publisher.dead_letter(dead, "planted", "a dead letter of the session to erase")
    assert publisher.close().ok
    return SealedStream(
        settings, kek_file, signing_keyring, tokens, sessions, last["session_id"], started
    )


@pytest.fixture
def environment(stream: SealedStream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", stream.settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", stream.settings.topics.prefix)
    monkeypatch.setenv("TURNAUDIT_LOG_SURFACES", "keep")
    monkeypatch.delenv(SURFACE_KEYRING_ENV, raising=False)


def replayed(tmp_path: Path, name: str) -> dict[str, list[str]]:
    """``replay --into jsonl:`` (exit 0): each event id's input tokens as written out."""
    out = tmp_path / f"{name}.jsonl"
    assert main(["replay", "--into", f"jsonl:{out}"]) == 0
    lines = [json.loads(line) for line in out.read_bytes().split(b"\n") if line]
    return {line["event"]["event_id"]: line["event"]["input_tokens"] for line in lines}


def dead_letter(stream: SealedStream) -> tuple[SealState | None, dict[str, Any]]:
    """The dead letter's bytes from the topic, decoded and opened with the keyring."""
    topic = stream.settings.topics.dlq
    found = resolve_range(stream.settings, topic, RangeSpec())
    (letter,) = list(read_range(stream.settings, topic, found.start, found.end))
    event = dict(decoder_for(stream.settings)(letter.value()).event)
    keys = load_directory(stream.settings, FileKeyring.load(stream.kek_file))
    return keys.open_in_place(cast(TurnEvent, event)), event


def test_an_erasure_reaches_every_reader_of_the_stream_and_verify_still_proves_it_signed(
    stream: SealedStream,
    environment: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    without = replayed(tmp_path, "without")
    assert set(without) == set(stream.tokens)
    for event_id, tokens in without.items():
        assert tokens == [placeholder("no_keyring")] * len(stream.tokens[event_id])
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(stream.kek_file))
    assert replayed(tmp_path, "with") == stream.tokens  # every token, as published
    state, letter = dead_letter(stream)
    assert isinstance(state, Opened)
    assert letter["input_tokens"] == [DEAD]
    erased = stream.erased
    assert main(["erase", "--session", erased, "--by", "test", "--reason", "after replay"]) == 0
    after = replayed(tmp_path, "after")
    assert set(after) == set(stream.tokens)
    for event_id, tokens in after.items():
        if stream.sessions[event_id] == erased:
            assert tokens == [placeholder("key_erased")] * len(stream.tokens[event_id])
        else:
            assert tokens == stream.tokens[event_id]
    state, letter = dead_letter(stream)
    assert state == Sealed("key_erased")
    assert DEAD not in json.dumps(letter, default=str)
    for read in read_turn_events(stream.settings):  # the reading API, the environment's keyring
        assert read.event is not None
        if read.event["session_id"] == erased:
            assert read.sealing == Sealed("key_erased")
        else:
            assert isinstance(read.sealing, Opened)
            assert read.event["input_tokens"] == stream.tokens[read.event["event_id"]]
    capsys.readouterr()
    code = main(["verify", "--json", "--keyring", str(stream.signing_keyring), "--require-signed"])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert (code, report["unexplained"]) == (0, [])
    streams = report["trust"]["streams"]
    assert {s["status"] for s in streams} == {"signed"}
    assert {s["session_id"] for s in streams} == set(stream.sessions.values())
    # By time: the whole run's range erases every other session, one record each.
    since, until = stream.started, datetime.now(UTC) + timedelta(seconds=1)
    argv = ["erase", "--from", since.isoformat(), "--to", until.isoformat(), "--by", "test"]
    assert main(argv) == 0
    others = set(stream.sessions.values()) - {erased}
    assert f"data key(s) of {len(others)} session(s) destroyed" in capsys.readouterr().out
    for read in read_turn_events(stream.settings):
        assert read.sealing == Sealed("key_erased")
    topic = stream.settings.topics.erasures
    found = resolve_range(stream.settings, topic, RangeSpec())
    records = [
        json.loads(m.value() or b"")
        for m in read_range(stream.settings, topic, found.start, found.end)
    ]
    ranged = [r for r in records if r["range_from_ms"] is not None]
    assert sorted(r["session_id"] for r in ranged) == sorted(others)
    assert {(r["range_from_ms"], r["range_to_ms"]) for r in ranged} == {
        (int(since.timestamp() * 1000), int(until.timestamp() * 1000))
    }
    assert [r["session_id"] for r in records if r["range_from_ms"] is None] == [erased]
