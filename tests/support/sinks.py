"""Handing turns to a sink as the runtime does: each ``take``, then one ``flush``."""

from __future__ import annotations

from collections.abc import Iterable

from turnaudit.consumers.runtime import ConsumedTurn, Sink


def deliver(sink: Sink, turns: Iterable[ConsumedTurn]) -> None:
    """One batch: every turn taken in order, then flushed."""
    for turn in turns:
        sink.take(turn)
    sink.flush()
