"""Sealed then opened is the original; anything changed or moved is reported, never read.

Property tests over any turn identity and any surface text: the round trip (in memory,
and through the v5 wire format), a changed byte anywhere in the sealed form, a sealed
form moved to another turn, a wrapped data key moved to another session.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any, cast

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.events import encode
from tests.unit.sealing.support import (
    KeyTopic,
    any_text,
    ids,
    keyring,
    sealed_copy,
    sealer,
    turn_of,
    v5_turn,
    wire_text,
)
from turnaudit.events import SealedSurfaces, TurnEvent
from turnaudit.reading import DecodedTurnEvent
from turnaudit.sealing import Opened, Sealed, placeholder
from turnaudit.sealing.envelope import surfaces_of
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.verdicts import UNKNOWN_DOMAIN_SURFACE

DECODE = TurnEventDeserializer(shipped_catalog())

texts = st.tuples(
    any_text,
    any_text,
    any_text,
    st.lists(any_text, max_size=4).map(tuple),
    st.lists(st.tuples(any_text, any_text), max_size=4).map(tuple),
)


identities = st.tuples(ids, ids, ids, st.integers(-1, 2**63 - 1))


@given(identities, texts)
def test_any_turn_any_text_sealed_then_opened_equals_the_original(
    identity: tuple[str, str, str, int], parts: tuple[Any, ...]
) -> None:
    topic = KeyTopic()
    provider = keyring("kek-1")
    original = turn_of(identity, parts)
    sealed = sealed_copy(sealer(provider, topic), original)
    assert sealed["sealed"] is not None
    written = surfaces_of(sealed)
    # Nothing of the texts is left in the turn, but the count of tokens and steps.
    assert all(text in ("", UNKNOWN_DOMAIN_SURFACE) for text in written.texts())
    assert len(sealed["input_tokens"]) == len(original["input_tokens"])
    state = topic.directory(provider).open_in_place(sealed)
    assert isinstance(state, Opened)
    assert surfaces_of(sealed) == surfaces_of(cast(TurnEvent, original))
    assert sealed["tool_steps"] == original["tool_steps"]


@settings(max_examples=60)
@given(
    identities.filter(lambda i: i[3] >= 0),
    st.tuples(
        wire_text,
        wire_text,
        wire_text,
        st.lists(wire_text, min_size=1, max_size=3).map(tuple),
        st.lists(st.tuples(wire_text, wire_text), max_size=3).map(tuple),
    ),
)
def test_a_sealed_turn_survives_the_v5_wire_and_opens_to_the_original(
    identity: tuple[str, str, str, int], parts: tuple[Any, ...]
) -> None:
    topic = KeyTopic()
    provider = keyring("kek-1")
    original = turn_of(identity, parts)
    sealed = sealed_copy(sealer(provider, topic), original)
    decoded: DecodedTurnEvent = DECODE(encode(dict(sealed)))
    read = cast(TurnEvent, decoded.event)
    assert read["sealed"] == sealed["sealed"]
    assert isinstance(topic.directory(provider).open_in_place(read), Opened)
    assert surfaces_of(read) == surfaces_of(cast(TurnEvent, original))


def _flip(blob: bytes, at: int, bit: int) -> bytes:
    at %= len(blob)
    return blob[:at] + bytes([blob[at] ^ (1 << bit)]) + blob[at + 1 :]


@given(
    identities, texts, st.sampled_from(["nonce", "ciphertext"]), st.integers(0), st.integers(0, 7)
)
def test_any_changed_byte_of_a_sealed_field_fails_to_open_and_is_reported(
    identity: tuple[str, str, str, int],
    parts: tuple[Any, ...],
    field: str,
    at: int,
    bit: int,
) -> None:
    topic = KeyTopic()
    provider = keyring("kek-1")
    sealed = sealed_copy(sealer(provider, topic), turn_of(identity, parts))
    box = sealed["sealed"]
    assert box is not None
    changed = dict(box)
    changed[field] = _flip(box[field], at, bit)  # type: ignore[literal-required]  # field is nonce or ciphertext
    sealed["sealed"] = cast(SealedSurfaces, changed)
    state = topic.directory(provider).open_in_place(sealed)
    assert state == Sealed("tampered")
    _assert_only_placeholders(sealed, "tampered")


def _assert_only_placeholders(event: TurnEvent, reason: Any) -> None:
    """Every sealed field shows the placeholder: never a text decoded from the blob."""
    shown = set(surfaces_of(event).texts())
    assert shown <= {placeholder(reason), UNKNOWN_DOMAIN_SURFACE}


moves = st.sampled_from(["event_id", "session_id", "producer_id", "sequence"])


@given(identities, texts, moves, ids, st.integers(-1, 2**63 - 1))
def test_a_sealed_field_moved_to_another_turn_fails_to_open(
    identity: tuple[str, str, str, int],
    parts: tuple[Any, ...],
    moved: str,
    other_text: str,
    other_number: int,
) -> None:
    topic = KeyTopic()
    provider = keyring("kek-1")
    keys = sealer(provider, topic)
    source = sealed_copy(keys, turn_of(identity, parts))
    # The target turn differs from the source in one identity field; its own sealed form
    # is replaced by the source's (the same session's data key when the session is kept).
    target_plain = turn_of(identity, parts)
    target_plain[moved] = other_number if moved == "sequence" else other_text
    if target_plain[moved] == source[moved]:  # type: ignore[literal-required]  # moved is a field name
        return  # the same turn: nothing moved
    target = sealed_copy(keys, target_plain)
    target["sealed"] = copy.deepcopy(source["sealed"])
    state = topic.directory(provider).open_in_place(target)
    assert isinstance(state, Sealed)
    assert state.reason in ("tampered", "key_tampered")
    _assert_only_placeholders(target, state.reason)


@given(ids, ids, texts)
def test_a_wrapped_data_key_moved_to_another_session_does_not_unwrap(
    session: str, other: str, parts: tuple[Any, ...]
) -> None:
    if session == other:
        return
    topic = KeyTopic()
    provider = keyring("kek-1")
    sealed = sealed_copy(sealer(provider, topic), turn_of((session, "e", "p", 0), parts))
    # Rewrite the key record as if it belonged to ``other``, and the turn with it.
    ((key, value),) = topic.messages
    assert value is not None
    forged = value.replace(
        f'"session_id": {_json(session)}'.encode(), f'"session_id": {_json(other)}'.encode()
    )
    topic.messages[0] = (key, forged)
    sealed["session_id"] = other
    state = topic.directory(provider).open_in_place(sealed)
    assert state == Sealed("key_tampered")


def _json(text: str) -> str:
    return json.dumps(text)


@settings(max_examples=40)
@given(wire_text, st.lists(st.tuples(wire_text, wire_text), max_size=3).map(tuple))
def test_the_native_encoder_writes_a_sealed_turn_as_fastavro_does(
    surface: str, tools: tuple[tuple[str, str], ...]
) -> None:
    schema = shipped_catalog().version(5)
    serializer = SingleObjectSerializer(schema)
    sealed = sealed_copy(sealer(keyring("k"), KeyTopic()), v5_turn(surface=surface, tools=tools))
    written = serializer(dict(sealed))
    reference = io.BytesIO()
    fastavro.schemaless_writer(reference, schema.parsed, dict(sealed))
    assert serializer.stats().fastavro_records == 0  # the crate wrote it, driven by the schema
    assert written[10:] == reference.getvalue()
