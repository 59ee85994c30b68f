"""The checkpoint of a replay: the recorded bound and how far the output has got.

Written as JSON (:class:`CheckpointJson`), replaced atomically (write, fsync,
rename); a torn file, another format or anything not a checkpoint is refused
with one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from turnaudit.errors import ConfigurationError
from turnaudit.replay import order
from turnaudit.replay.canonical import by_partition, partitions
from turnaudit.replay.files import write_atomically

CHECKPOINT_FORMAT = 2


class CheckpointJson(TypedDict):
    """The checkpoint file's JSON (partitions as string keys)."""

    format: int
    fingerprint: str
    topic: str
    order: str
    block: int
    start: dict[str, int]
    end: dict[str, int]
    next: dict[str, int]
    cursor: int | None
    taken: int
    window_ms: list[int] | None
    output_bytes: int
    events: int
    undecodable: int
    outside_window: int
    complete: bool


@dataclass
class ReplayCheckpoint:
    """The recorded bound and how far the output has got.

    ``cursor``/``taken``: the partition whose block is being written and how
    many of that block's messages are written (the place in the block order).
    ``window``: the event-time window in epoch millis, when there is one.
    """

    fingerprint: str
    topic: str
    start: dict[int, int]
    end: dict[int, int]
    next: dict[int, int]
    output_bytes: int
    events: int
    undecodable: int
    complete: bool = False
    cursor: int | None = None
    taken: int = 0
    window: tuple[int, int] | None = None
    outside_window: int = 0

    @property
    def total(self) -> int:
        """Messages in the broker range."""
        return sum(self.end[p] - self.start[p] for p in self.end)

    @property
    def read(self) -> int:
        """Messages of the broker range read so far (written or outside the window)."""
        return sum(self.next.get(p, self.start[p]) - self.start[p] for p in self.end)

    def as_json(self) -> CheckpointJson:
        return {
            "format": CHECKPOINT_FORMAT,
            "fingerprint": self.fingerprint,
            "topic": self.topic,
            "order": order.ORDER,
            "block": order.BLOCK_MESSAGES,
            "start": by_partition(self.start),
            "end": by_partition(self.end),
            "next": by_partition(self.next),
            "cursor": self.cursor,
            "taken": self.taken,
            "window_ms": None if self.window is None else list(self.window),
            "output_bytes": self.output_bytes,
            "events": self.events,
            "undecodable": self.undecodable,
            "outside_window": self.outside_window,
            "complete": self.complete,
        }

    @classmethod
    def load(cls, path: Path) -> ReplayCheckpoint:
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise ConfigurationError(
                f"{path} is not a replay checkpoint ({exc}); remove it to start over"
            ) from exc

    @classmethod
    def from_json(cls, raw: Any) -> ReplayCheckpoint:
        """The checkpoint a parsed file holds; ``ValueError`` (or ``KeyError``, ``TypeError``,
        …) when it is not one of this format."""
        if raw.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"format {raw.get('format')!r}")
        window = raw["window_ms"]
        return cls(
            fingerprint=str(raw["fingerprint"]),
            topic=str(raw["topic"]),
            start=partitions(raw["start"]),
            end=partitions(raw["end"]),
            next=partitions(raw["next"]),
            output_bytes=int(raw["output_bytes"]),
            events=int(raw["events"]),
            undecodable=int(raw["undecodable"]),
            complete=bool(raw["complete"]),
            cursor=None if raw["cursor"] is None else int(raw["cursor"]),
            taken=int(raw["taken"]),
            window=None if window is None else (int(window[0]), int(window[1])),
            outside_window=int(raw["outside_window"]),
        )

    def save(self, path: Path) -> None:
        """Replace the checkpoint atomically: a reader sees the old one or the new one."""
        write_atomically(path, json.dumps(self.as_json(), indent=2).encode() + b"\n")
