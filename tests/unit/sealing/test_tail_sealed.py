"""``turnaudit tail`` over sealed turns: with the keyring a line shows the turn's surfaces
as the policy writes them (the text under ``keep``, its keyed hash under ``hash``); without
it, or for a turn erased or tampered with, the verdicts and the ``[sealed: <reason>]``
placeholder, never the text, and never a failure. Under ``drop`` nothing is opened."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from tests.support.events import encode
from tests.unit.sealing.support import KeyTopic, keyring, sealed_copy, sealer, v5_turn, wire_text
from turnaudit.cli import main
from turnaudit.consumers.tail import TurnView
from turnaudit.errors import BrokerError
from turnaudit.records import StoredRecord
from turnaudit.redaction import DROPPED, Redaction, SurfacePolicy
from turnaudit.sealing import SURFACE_KEYRING_ENV, FileKeyring, KeyDirectory, placeholder
from turnaudit.sealing.opening import TurnOpener
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer

DECODE = TurnEventDeserializer(shipped_catalog())
KEEP = Redaction(SurfacePolicy.KEEP)
HASH = Redaction(SurfacePolicy.HASH, b"hash key")


def tail_line(
    event: Any, surfaces: Redaction, topic: KeyTopic, provider: FileKeyring | None
) -> tuple[str, int]:
    """The line tail prints for ``event`` as a message, and how often the key topic was read."""
    asked = []

    def keys() -> KeyDirectory:
        asked.append(1)
        return topic.directory(provider)

    view = TurnView(surfaces=surfaces, opener=TurnOpener(keys if provider else None))
    line = view.line_for(StoredRecord("t.turn-events", 0, 7, None, encode(dict(event))), DECODE)
    assert line is not None
    return line, len(asked)


def said_and_answer(line: str) -> tuple[str, str]:
    """The quoted texts after ``said=`` and ``answer=`` (JSON strings)."""
    decoder = json.JSONDecoder()
    said, end = decoder.raw_decode(line, line.index("said=") + len("said="))
    answer, _ = decoder.raw_decode(line, line.index("answer=", end) + len("answer="))
    return said, answer


@settings(max_examples=40, deadline=None)
@given(surface=wire_text, token=wire_text)
def test_with_the_keyring_the_line_shows_the_surfaces_as_the_policy_writes_them(
    surface: str, token: str
) -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    sealed = sealed_copy(sealer(provider, topic), v5_turn(surface=surface, tokens=(token,)))
    kept, asked = tail_line(copy.deepcopy(sealed), KEEP, topic, provider)
    assert said_and_answer(kept) == (token, surface)
    assert asked == 1
    assert "safety=pass" in kept
    assert kept.splitlines() == [kept]  # one line, whatever the texts hold
    hashed, _ = tail_line(sealed, HASH, topic, provider)
    assert said_and_answer(hashed) == (HASH.tokens([token]), HASH.text(surface))


@settings(max_examples=40, deadline=None)
@given(surface=wire_text.filter(lambda t: len(t) > 3))
def test_without_the_keyring_the_line_shows_verdicts_and_the_placeholder_never_the_text(
    surface: str,
) -> None:
    topic = KeyTopic()
    sealed = sealed_copy(sealer(keyring("kek-1"), topic), v5_turn(surface=surface))
    for policy in (KEEP, HASH):
        line, asked = tail_line(copy.deepcopy(sealed), policy, topic, None)
        assert said_and_answer(line) == (placeholder("no_keyring"), placeholder("no_keyring"))
        assert json.dumps(surface) not in line
        assert "safety=pass" in line
        assert asked == 0


def test_under_drop_no_surface_is_shown_and_the_key_topic_is_never_read() -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    sealed = sealed_copy(sealer(provider, topic), v5_turn(surface="the secret answer"))
    line, asked = tail_line(sealed, DROPPED, topic, provider)
    assert asked == 0
    assert "said=" not in line
    assert "secret" not in line
    assert "safety=pass" in line


def _flipped(event: Any) -> Any:
    tampered = copy.deepcopy(event)
    ciphertext = bytearray(tampered["sealed"]["ciphertext"])
    ciphertext[0] ^= 1
    tampered["sealed"]["ciphertext"] = bytes(ciphertext)
    return tampered


def _erased(topic: KeyTopic, event: Any) -> Any:
    topic.tombstone(event["sealed"]["data_key_id"])
    return event


@pytest.mark.parametrize(
    ("change", "reason"),
    [(lambda _topic, e: _flipped(e), "tampered"), (_erased, "key_erased")],
    ids=["tampered", "erased"],
)
def test_a_tampered_or_erased_turn_reads_sealed_with_its_reason_and_the_others_open(
    change: Any, reason: str
) -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    keys = sealer(provider, topic)
    hit = sealed_copy(keys, v5_turn("s-hit", surface="hit answer", tokens=("hit",)))
    other = sealed_copy(keys, v5_turn("s-other", surface="other answer", tokens=("other",)))
    hit = change(topic, hit)
    line, _ = tail_line(hit, KEEP, topic, provider)
    assert said_and_answer(line) == (placeholder(reason), placeholder(reason))
    assert "hit answer" not in line
    assert "safety=pass" in line
    line, _ = tail_line(other, KEEP, topic, provider)
    assert said_and_answer(line) == ("other", "other answer")


def test_a_key_topic_that_cannot_be_read_still_gives_the_turns_line_without_surfaces() -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    sealed = sealed_copy(sealer(provider, topic), v5_turn(surface="the secret answer"))

    def unreadable() -> KeyDirectory:
        raise BrokerError("surface-keys: broker unreachable")

    view = TurnView(surfaces=KEEP, opener=TurnOpener(unreadable))
    line = view.line_for(StoredRecord("t", 0, 7, None, encode(dict(sealed))), DECODE)
    assert line is not None
    assert line.endswith("(surfaces not opened: surface-keys: broker unreachable)")
    assert "secret" not in line
    assert "safety=pass" in line


@pytest.mark.parametrize("breaker", ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1e", "\x85", "\u2028"])
def test_a_text_holding_any_line_break_stays_on_its_line_and_reads_back(breaker: str) -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    text = f"first{breaker}second"
    sealed = sealed_copy(sealer(provider, topic), v5_turn(surface=text, tokens=(text,)))
    line, _ = tail_line(sealed, KEEP, topic, provider)
    assert line.splitlines() == [line]
    assert said_and_answer(line) == (text, text)


@pytest.mark.parametrize("policy", ["drop", "keep"])
def test_a_bad_keyring_stops_tail_at_start_in_one_line_under_any_policy(
    policy: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keyring_file = tmp_path / "kek.toml"
    keyring_file.write_text('active = "k"\n')
    keyring_file.chmod(0o600)
    monkeypatch.setenv(SURFACE_KEYRING_ENV, str(keyring_file))
    monkeypatch.setenv("TURNAUDIT_LOG_SURFACES", policy)
    assert main(["tail"]) == 2  # before any cluster is asked: the unit tier has none
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{SURFACE_KEYRING_ENV}={keyring_file}" in err
