"""``turnaudit replay`` over sealed turns on the real broker, as a user runs it (the CLI,
the environment's keyring and surface policy): with the keyring, the jsonl and htir
outputs hold every text the runtime wrote (then the policy); without it, placeholders
and exit 0; once a session is erased, its turns read as erased and the others still open.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.verify_helpers import fresh_topics
from turnaudit.cli import main
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, placeholder
from turnaudit.sealing.key_topic import erase_session
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

TURNS = 60


@dataclass(frozen=True)
class SealedStream:
    settings: KafkaSettings
    kek_file: Path
    tokens: dict[str, list[str]]  # event id -> its input tokens as published
    sessions: dict[str, str]  # event id -> session


@pytest.fixture(scope="module")
def stream(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SealedStream:
    folder = tmp_path_factory.mktemp("sealed-replay")
    kek_file = folder / "surface-keys.toml"
    key = base64.b64encode(os.urandom(32)).decode()
    kek_file.write_text(f'active = "kek-1"\n[keys]\nkek-1 = "{key}"\n')
    kek_file.chmod(0o600)
    settings = fresh_topics(kafka_bootstrap)
    publisher = TurnEventPublisher(
        settings,
        spool_dir=folder / "spool",
        registry=CollectorRegistry(),
        surface_keys=FileKeyring.load(kek_file),
    )
    tokens: dict[str, list[str]] = {}
    sessions: dict[str, str] = {}
    sim = TurnRuntimeSimulator(23, schema_versions=(5,), concurrent_sessions=4)
    for i, event in enumerate(sim.events(TURNS)):
        event["input_tokens"] = [*event["input_tokens"], f"<planted token {i}>"]
        event_id = publisher.publish(event)
        tokens[event_id] = list(event["input_tokens"])
        sessions[event_id] = event["session_id"]
    assert publisher.close().ok
    return SealedStream(settings, kek_file, tokens, sessions)


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


def test_replay_opens_sealed_turns_with_the_keyring_then_placeholders_without_then_erased(
    stream: SealedStream, environment: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = replayed(tmp_path, "without")
    assert set(without) == set(stream.tokens)
    for event_id, tokens in without.items():
        assert tokens == [placeholder("no_keyring")] * len(stream.tokens[event_id])
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(stream.kek_file))
    assert replayed(tmp_path, "with") == stream.tokens  # every token, as published
    erased = next(iter(stream.sessions.values()))
    erase_session(stream.settings, erased, erased_by="test", reason="replay after erasure")
    after = replayed(tmp_path, "after")
    for event_id, tokens in after.items():
        if stream.sessions[event_id] == erased:
            assert tokens == [placeholder("key_erased")] * len(stream.tokens[event_id])
        else:
            assert tokens == stream.tokens[event_id]
