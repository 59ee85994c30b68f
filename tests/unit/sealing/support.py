"""Sealed turns for the sealing tests: keyrings, v5 turns, a publisher-side key store."""

from __future__ import annotations

import base64
import copy
import os
from typing import Any, cast

from hypothesis import strategies as st

from tests.support.events import turn
from turnaudit.events import OutgoingTurnEvent, TurnEvent
from turnaudit.sealing import DataKeyRecord, FileKeyring, KeyDirectory, SessionKeys

# Any Unicode: lone surrogates too (sealing is total; only Avro cannot carry them).
# Long texts (1 to 10 thousand characters) are drawn as a short text repeated: any length
# without drawing every character.
long_text = st.builds(
    lambda unit, size: (unit * size)[:size],
    st.text(min_size=1, max_size=40),
    st.integers(1000, 10_000),
)
any_text = st.text(max_size=200) | long_text
# What a v5 turn can carry through Avro (no lone surrogates).
wire_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=300)
ids = st.text(max_size=40)


def keyring(*key_ids: str, active: str | None = None) -> FileKeyring:
    return FileKeyring({k: os.urandom(32) for k in key_ids}, active or key_ids[-1])


def keyring_text(keys: dict[str, bytes], active: str) -> str:
    lines = [f'active = "{active}"', "[keys]"]
    lines += [f'"{k}" = "{base64.b64encode(v).decode()}"' for k, v in keys.items()]
    return "\n".join(lines) + "\n"


class KeyTopic:
    """The key topic as a list of (key, value) messages, in order."""

    def __init__(self) -> None:
        self.messages: list[tuple[bytes, bytes | None]] = []

    def store(self, record: DataKeyRecord) -> None:
        self.messages.append((record.data_key_id.encode(), record.encode()))

    def tombstone(self, data_key_id: str) -> None:
        self.messages.append((data_key_id.encode(), None))

    def directory(self, provider: FileKeyring | None) -> KeyDirectory:
        found = KeyDirectory(provider)
        for key, value in self.messages:
            found.apply(key, value)
        return found


def sealer(provider: FileKeyring, topic: KeyTopic) -> SessionKeys:
    return SessionKeys(provider, topic.store, clock_ms=lambda: 1_700_000_000_000)


def v5_turn(
    session: str = "s-1",
    sequence: int = 0,
    *,
    event_id: str | None = None,
    producer_id: str = "p-1",
    surface: str = "Take 200mg.",
    walk: str = "walk:triage",
    articulation: str = "Take 200mg.",
    tokens: tuple[str, ...] = ("how", "much"),
    tools: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    event = turn(
        session,
        sequence,
        version=5,
        surface=surface,
        surface_before_hedge=surface,
        walk_surface=walk,
        articulation_surface=articulation,
        input_tokens=list(tokens),
    )
    event["event_id"] = event_id if event_id is not None else f"{session}-{sequence}"
    event["producer_id"] = producer_id
    event["tool_steps"] = [
        {"name": f"tool-{i}", "arguments": a, "result": r, "ok": True}
        for i, (a, r) in enumerate(tools)
    ]
    return event


def sealed_copy(keys: SessionKeys, event: dict[str, Any]) -> TurnEvent:
    """The turn as the publisher writes it (sealed), typed as a reader gets it."""
    outgoing = copy.deepcopy(event)
    keys.seal(cast(OutgoingTurnEvent, outgoing))
    return cast(TurnEvent, outgoing)


def turn_of(identity: tuple[str, str, str, int], parts: tuple[Any, ...]) -> dict[str, Any]:
    """A v5 turn of (session, event id, producer, sequence) with the drawn surfaces, walk,
    articulation, tokens and tools."""
    session, event_id, producer, sequence = identity
    surface, walk, articulation, tokens, tools = parts
    return v5_turn(
        session,
        sequence,
        event_id=event_id,
        producer_id=producer,
        surface=surface,
        walk=walk,
        articulation=articulation,
        tokens=tokens,
        tools=tools,
    )
