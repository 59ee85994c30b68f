"""Sealed surfaces end to end on the real broker.

A signed publisher with a surface keyring publishes simulated v5 turns that carry a
planted card number in every surface, token and tool call, and one dead letter. Then:
the raw bytes of turn-events and of the dead-letter topic hold none of the planted
texts; a reader with the keyring sees every text as published; one without sees
verdicts and placeholders and never fails; ``turnaudit erase`` of one session makes
exactly that session's turns unreadable, records who erased what and when, and
``verify --keyring --require-signed`` still proves every stream complete and signed.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.support.verify_helpers import fresh_topics
from turnaudit.checkpoints import keyring_entry_toml
from turnaudit.cli import main
from turnaudit.events import OutgoingTurnEvent
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.reading import Opened, Sealed, load_directory, read_turn_events
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, KeyDirectory, placeholder
from turnaudit.sealing.envelope import Surfaces, surfaces_of
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key

pytestmark = pytest.mark.broker

CARD = "4111-1111-1111-1111"
EVENTS = 300
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
ENV = ("KAFKA_BOOTSTRAP_SERVERS", "TURNAUDIT_TOPIC_PREFIX", SURFACE_KEYRING_ENV)


def marked(events: Iterator[OutgoingTurnEvent]) -> Iterator[OutgoingTurnEvent]:
    """Each main turn's surfaces and tokens and every tool call carry the card number and
    where it was planted (texts extended, never replaced: the contracts still hold)."""
    for i, event in enumerate(events):
        if event["path"] == "MAIN":
            for name in ("surface", "walk_surface", "articulation_surface"):
                event[name] = f"{event[name]} [{CARD} {name}-{i}]"  # type: ignore[literal-required]  # a surface field
            event["input_tokens"] = [*event["input_tokens"], f"[{CARD} token-{i}]"]
        event["tool_steps"] = [
            {**call, "arguments": f'{{"card": "{CARD}"}}', "result": f"[{CARD} result-{i}]"}
            for call in event.get("tool_steps", ())
        ]
        yield event


@dataclass(frozen=True)
class SealedRun:
    settings: KafkaSettings
    kek_file: Path
    signing_keyring: Path
    published: dict[str, Surfaces]  # event id -> the texts as published
    sessions: dict[str, set[str]]  # session -> its event ids


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SealedRun]:
    saved = {k: os.environ.get(k) for k in ENV}
    keys = tmp_path_factory.mktemp("keys")
    kek_file = keys / "surface-keys.toml"
    kek_file.write_text(
        f'active = "kek-1"\n[keys]\nkek-1 = "{base64.b64encode(os.urandom(32)).decode()}"\n'
    )
    kek_file.chmod(0o600)
    made = generate_keys(keys, "runtime-1")
    key = load_signing_key(made.private_path, "runtime-1")
    signing_keyring = keys / "keyring.toml"
    signing_keyring.write_text(keyring_entry_toml("runtime-1", key.public_pem(), LONG_AGO))
    settings = fresh_topics(kafka_bootstrap)
    os.environ[SURFACE_KEYRING_ENV] = str(kek_file)
    try:
        registry = CollectorRegistry()
        publisher = TurnEventPublisher(
            settings,
            registry=registry,
            spool_dir=tmp_path_factory.mktemp("spool"),
            checkpoints=CheckpointSettings(key, interval_s=0.05, max_turns=40),
        )
        published: dict[str, Surfaces] = {}
        sessions: dict[str, set[str]] = {}
        sim = TurnRuntimeSimulator(41, schema_versions=(5,), concurrent_sessions=6)
        last: OutgoingTurnEvent | None = None
        for event in marked(sim.events(EVENTS)):
            texts = surfaces_of(event)
            event_id = publisher.publish(event)
            published[event_id] = texts
            sessions.setdefault(event["session_id"], set()).add(event_id)
            last = event
        assert last is not None
        dead = dict(last)
        dead["surface"] = f"[{CARD} dead-letter]"
        publisher.dead_letter(dead, "planted", "a dead letter with a planted surface")  # type: ignore[arg-type]  # a copy of a turn
        assert publisher.close().ok
        # One data key per session, every record acknowledged.
        made = registry.get_sample_value("turnaudit_surface_data_keys_total")
        assert made == len(sessions)
        assert registry.get_sample_value("turnaudit_surface_data_keys_lost_total") == 0
        yield SealedRun(settings, kek_file, signing_keyring, published, sessions)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def raw_values(settings: KafkaSettings, topic: str) -> list[bytes]:
    found = resolve_range(settings, topic, RangeSpec())
    return [m.value() or b"" for m in read_range(settings, topic, found.start, found.end)]


def directory(run: SealedRun) -> KeyDirectory:
    return load_directory(run.settings, FileKeyring.load(run.kek_file))


def test_the_raw_bytes_of_turn_events_and_dead_letters_hold_no_planted_text(
    run: SealedRun,
) -> None:
    turns = raw_values(run.settings, run.settings.topics.turn_events)
    letters = raw_values(run.settings, run.settings.topics.dlq)
    assert len(turns) == EVENTS
    assert len(letters) == 1
    planted = sum(CARD in t for s in run.published.values() for t in s.texts())
    assert planted > EVENTS  # the probe has something to find
    found = [v for v in turns + letters if CARD.encode() in v]
    assert found == []
    # ... nor any planted text in another encoding the bytes could hold.
    assert not any(CARD.encode("utf-16-le") in v for v in turns + letters)


def test_a_reader_with_the_keyring_sees_every_text_as_published(run: SealedRun) -> None:
    read = list(read_turn_events(run.settings, keys=directory(run)))
    assert len(read) == EVENTS
    for turn in read:
        assert turn.event is not None
        assert isinstance(turn.sealing, Opened)
        assert surfaces_of(turn.event) == run.published[turn.event["event_id"]]


def test_a_reader_without_the_keyring_sees_verdicts_and_placeholders_and_never_fails(
    run: SealedRun,
) -> None:
    os.environ.pop(SURFACE_KEYRING_ENV, None)  # the default: the environment's keyring
    read = list(read_turn_events(run.settings))
    assert len(read) == EVENTS
    for turn in read:
        assert turn.error is None
        assert turn.event is not None
        assert turn.sealing == Sealed("no_keyring")
        assert turn.event["verdicts"]["schema_version"] == 5
        texts = set(surfaces_of(turn.event).texts())
        assert not any(CARD in t for t in texts)
        assert placeholder("no_keyring") in texts


def test_erasing_one_session_leaves_exactly_the_others_readable_and_verify_proves_all_signed(
    run: SealedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = run.settings.bootstrap_servers or ""
    os.environ["TURNAUDIT_TOPIC_PREFIX"] = run.settings.topics.prefix
    erased = sorted(run.sessions)[0]
    capsys.readouterr()
    assert main(["erase", "--session", erased, "--by", "dpo@example", "--reason", "GDPR-17"]) == 0
    assert f"session {erased!r}: 1 data key(s) destroyed" in capsys.readouterr().out
    for turn in read_turn_events(run.settings, keys=directory(run)):
        assert turn.event is not None
        if turn.event["session_id"] == erased:
            assert turn.sealing == Sealed("key_erased")
            assert not any(CARD in t for t in surfaces_of(turn.event).texts())
        else:
            assert isinstance(turn.sealing, Opened)
            assert surfaces_of(turn.event) == run.published[turn.event["event_id"]]
    records = [json.loads(v) for v in raw_values(run.settings, run.settings.topics.erasures)]
    assert [
        (r["session_id"], r["erased_by"], r["reason"], len(r["data_key_ids"])) for r in records
    ] == [(erased, "dpo@example", "GDPR-17", 1)]
    assert records[0]["erased_at_ms"] > 0
    # The turns are still there, sealed: verify proves them complete and signed.
    code = main(["verify", "--json", "--keyring", str(run.signing_keyring), "--require-signed"])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert report["unexplained"] == []
    assert code == 0
    assert {s["status"] for s in report["trust"]["streams"]} == {"signed"}
    assert {s["session_id"] for s in report["trust"]["streams"]} == set(run.sessions)


def test_rotating_the_kek_and_rewrapping_lets_the_old_kek_go_and_keeps_the_erasure(
    run: SealedRun, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = run.settings.bootstrap_servers or ""
    os.environ["TURNAUDIT_TOPIC_PREFIX"] = run.settings.topics.prefix
    old = run.kek_file.read_text().split("kek-1 = ", 1)[1].strip()
    new = base64.b64encode(os.urandom(32)).decode()
    rotated = tmp_path / "rotated.toml"
    rotated.write_text(f'active = "kek-2"\n[keys]\nkek-1 = {old}\nkek-2 = "{new}"\n')
    rotated.chmod(0o600)
    os.environ[SURFACE_KEYRING_ENV] = str(rotated)
    capsys.readouterr()
    assert main(["surface-keys", "rewrap"]) == 0
    said = capsys.readouterr().out
    # Every session's key but the erased one's, wrapped again by kek-2.
    assert said.startswith(f"{len(run.sessions) - 1} data key(s) wrapped again by kek-2; 0 ")
    only_new = tmp_path / "only-new.toml"
    only_new.write_text(f'active = "kek-2"\n[keys]\nkek-2 = "{new}"\n')
    only_new.chmod(0o600)
    erased = sorted(run.sessions)[0]  # by the test above
    keys = load_directory(run.settings, FileKeyring.load(only_new))
    for turn in read_turn_events(run.settings, keys=keys):
        assert turn.event is not None
        if turn.event["session_id"] == erased:
            assert turn.sealing == Sealed("key_erased")
        else:
            assert isinstance(turn.sealing, Opened)
            assert surfaces_of(turn.event) == run.published[turn.event["event_id"]]
    # A second run finds nothing to do.
    assert main(["surface-keys", "rewrap"]) == 0
    assert capsys.readouterr().out.startswith("0 data key(s) wrapped again by kek-2; ")
