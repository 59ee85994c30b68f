"""Ranges of turns with every kind of fault, as verify's and the follower's property tests
draw them: chained streams of several producers and sessions, legacy v1/v2 turns, then
drops, swaps, redeliveries, duplicate copies, changed content, reused ids, forged and
renumbered positions; stored as a consumer reads them (offsets per partition by key)."""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass
from functools import cache
from typing import Any

from hypothesis import strategies as st

from tests.support.events import encode, turn
from tests.unit.verify import scenario

FAULTS = ("drop", "swap", "redeliver", "duplicate", "change", "reuse_id", "forge", "renumber")


@dataclass(frozen=True)
class Item:
    """A message to store (``again`` None) or a redelivery of stored item ``again``."""

    uid: int
    key: bytes
    event: dict[str, Any]
    again: int | None = None


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes
    value: bytes


@cache
def chained(count: int, seed: int, producers: int, sessions: int) -> tuple[dict[str, Any], ...]:
    return tuple(
        s.event
        for s in scenario.stamped_events(count, seed=seed, producers=producers, sessions=sessions)
    )


def legacy(sessions: int, turns: int) -> list[dict[str, Any]]:
    """v1/v2 turns: no producer id, deduped by event id alone."""
    return [turn(f"legacy-{s}", n, version=2) for n in range(turns) for s in range(sessions)]


@st.composite
def faulty_ranges(
    draw: st.DrawFn, faults: tuple[str, ...] = (), *, with_legacy: bool = True
) -> list[Item]:
    events = list(
        chained(
            draw(st.integers(3, 24)),
            draw(st.sampled_from([1, 2, 3])),
            draw(st.integers(1, 2)),
            draw(st.integers(1, 3)),
        )
    )
    old = legacy(draw(st.integers(0, 2)), draw(st.integers(0, 5))) if with_legacy else []
    merged: list[dict[str, Any]] = []
    while events or old:  # each kind keeps its own order, interleaved at random
        source = events if not old or (events and draw(st.booleans())) else old
        merged.append(source.pop(0))
    items = [Item(i, e["session_id"].encode(), e) for i, e in enumerate(merged)]
    uid = len(items)
    for _ in range(draw(st.integers(0, 10))):
        if not items:
            break
        fault = draw(st.sampled_from(faults or FAULTS))
        i = draw(st.integers(0, len(items) - 1))
        at = draw(st.integers(i + 1, len(items)))
        item, uid = items[i], uid + 1
        event = item.event
        if fault == "drop":
            del items[i]
            continue
        if fault == "swap":
            j = min(at, len(items) - 1)
            items[i], items[j] = items[j], items[i]
            continue
        if fault == "redeliver":  # the same message read again at its offset
            items.insert(at, Item(uid, item.key, event, again=item.uid))
            continue
        if fault == "change":  # the same event id, other content
            event = {**event, "surface": event["surface"] + " (changed)"}
        elif fault == "reuse_id":  # the same event id at a fresh position
            event = {**event, "sequence": event["sequence"] + draw(st.integers(1, 30))}
        elif fault == "forge":  # another event id at a taken position
            event = {**event, "event_id": f"forged-{uid}"}
        elif fault == "renumber":  # another event id at an earlier position
            event = {
                **event,
                "event_id": f"renumbered-{uid}",
                "sequence": max(0, event["sequence"] - draw(st.integers(1, 3))),
            }
        items.insert(at, Item(uid, item.key, event))  # "duplicate": a second stored copy
    return items


def stored(items: list[Item]) -> list[Message]:
    """The messages as a consumer reads them: offsets per partition (by key), a
    redelivery at its original's place (dropped when its original is not stored yet)."""
    offsets: Counter[int] = Counter()
    placed: dict[int, Message] = {}
    out = []
    for item in items:
        if item.again is not None:
            if item.again in placed:
                out.append(placed[item.again])
            continue
        partition = zlib.crc32(item.key) % 2
        placed[item.uid] = Message(partition, offsets[partition], item.key, encode(item.event))
        offsets[partition] += 1
        out.append(placed[item.uid])
    return out
