"""Stamped, encoded TurnEvents for the identity and verify tests (no broker)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from turnaudit.identity import TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer


@dataclass(frozen=True)
class Stamped:
    key: bytes
    value: bytes
    event: dict[str, Any]


def stamped_events(
    count: int, *, seed: int = 3, producers: int = 1, sessions: int = 4
) -> list[Stamped]:
    """``count`` v3 turns of a few sessions, published round-robin by ``producers``
    publisher instances (each its own stamper), in publish order."""
    return list(_stamped(count, seed, producers, sessions))


@cache
def _stamped(count: int, seed: int, producers: int, sessions: int) -> tuple[Stamped, ...]:
    encode = SingleObjectSerializer(shipped_catalog().version(3))
    stampers = [TurnStamper() for _ in range(producers)]
    sim = TurnRuntimeSimulator(seed, schema_versions=(3,), concurrent_sessions=sessions)
    out = []
    for i, event in enumerate(sim.events(count)):
        stamper = stampers[i % producers]
        stamper.stamp(event)
        value = encode(event)
        stamper.commit(event, value)
        out.append(Stamped(event["session_id"].encode(), value, dict(event)))
    return tuple(out)
