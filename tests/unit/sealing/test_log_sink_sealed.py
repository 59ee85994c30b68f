"""The log sink and sealed surfaces: with the keyring the line holds the text the runtime
wrote (then today's policy applies), without it the placeholder, and under the default
``drop`` policy the key topic is never read (nothing would be written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.support.events import encode
from tests.support.sinks import deliver
from tests.unit.sealing.support import KeyTopic, keyring, sealed_copy, sealer, v5_turn, wire_text
from turnaudit.consumers.log_sink import LogSink, log_sink_service
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.settings import (
    LogSinkSettings,
    ServiceName,
    ServiceSettings,
    SurfaceRedaction,
)
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.errors import ConfigurationError
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, KeyDirectory, placeholder
from turnaudit.sealing.opening import TurnOpener
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

DECODE = TurnEventDeserializer(shipped_catalog())


def consumed(event: Any) -> ConsumedTurn:
    decoded = DECODE(encode(dict(event)))
    return ConsumedTurn(decoded, SequenceCheck(SequenceOutcome.IN_ORDER), "t.turn-events", 0, 1)


def lines(
    policy: SurfaceRedaction, topic: KeyTopic, provider: FileKeyring | None, turns: list[Any]
) -> tuple[list[dict[str, Any]], int]:
    asked = []

    def keys() -> KeyDirectory:
        asked.append(1)
        return topic.directory(provider)

    sink = LogSink(LogSinkSettings(policy, b"k"), CollectorRegistry(), opener=TurnOpener(keys))
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        deliver(sink, [consumed(t) for t in turns])
    return logs, len(asked)


@settings(max_examples=30)
@given(wire_text, wire_text)
def test_with_the_keyring_the_line_holds_the_text_as_written(surface: str, token: str) -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    turns = [sealed_copy(sealer(provider, topic), v5_turn(surface=surface, tokens=(token,)))]
    logs, asked = lines(SurfaceRedaction.KEEP, topic, provider, turns)
    assert asked == 1
    assert (logs[0]["surface"], logs[0]["input_tokens"]) == (surface, token)


def test_without_the_keyring_the_line_holds_the_placeholder_and_the_verdicts() -> None:
    topic = KeyTopic()
    turns = [sealed_copy(sealer(keyring("kek-1"), topic), v5_turn(surface="secret"))]
    logs, _ = lines(SurfaceRedaction.KEEP, topic, None, turns)
    assert logs[0]["surface"] == placeholder("no_keyring")
    assert logs[0]["safety_passed"] is True
    assert "secret" not in str(logs[0])


@pytest.mark.parametrize("policy", list(SurfaceRedaction))
def test_the_key_topic_is_read_once_and_only_when_the_policy_writes_surfaces(
    policy: SurfaceRedaction,
) -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    keys = sealer(provider, topic)
    turns = [sealed_copy(keys, v5_turn("s", n)) for n in range(3)]
    logs, asked = lines(policy, topic, provider, turns)
    assert len(logs) == 3
    assert asked == (0 if policy is SurfaceRedaction.DROP else 1)


def test_a_bad_keyring_stops_the_log_sink_at_start_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring_file = tmp_path / "kek.toml"
    keyring_file.write_text('active = "k"\n')
    keyring_file.chmod(0o600)
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(keyring_file))
    settings = ServiceSettings(ServiceName.LOG_SINK, KafkaSettings(), "g")
    with pytest.raises(ConfigurationError) as raised:
        log_sink_service(settings, registry=CollectorRegistry())
    assert "\n" not in str(raised.value)
    assert f"{SURFACE_KEYRING_ENV}={keyring_file}" in str(raised.value)
