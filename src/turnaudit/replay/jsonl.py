"""The JSONL output: one canonical JSON line per message.

A line's event holds its surfaces and tool I/O as the surface policy says
(``turnaudit.redaction``: ``null`` when dropped, the default); the file is its
owner's only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, TypedDict

from turnaudit.events import occurred_moment
from turnaudit.records import Record
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.replay.canonical import canonical_json
from turnaudit.replay.files import open_for_resume
from turnaudit.replay.outputs import ReplayOutput
from turnaudit.sealing.opening import TurnOpener
from turnaudit.serialization.wire import TurnEventDeserializer


class JsonlLine(TypedDict, total=False):
    """One line of the JSONL output: where the message was, then its event or an error."""

    partition: int | None
    offset: int | None
    error: str  # undecodable: what the decoder raised
    writer_version: int
    event: dict[str, Any]  # the decoded event in today's shape, occurred_at as ISO time


class JsonlOutput(ReplayOutput):
    """One canonical JSON line per message: where it was, its writer version and decoded event
    (or why it could not be decoded)."""

    resumable = True

    def __init__(
        self,
        path: Path,
        decode: TurnEventDeserializer,
        surfaces: Redaction = DROPPED,
        opener: TurnOpener | None = None,
    ) -> None:
        self._path = path
        self._opener = opener  # sealed turns opened before the policy (turn_opener)
        self._decode = decode
        self._surfaces = surfaces
        self._out: IO[bytes] | None = None

    def open(self, position: int) -> None:
        # Whatever was written after the last checkpoint is written again.
        self._out = open_for_resume(self._path, position)

    def write(self, messages: Sequence[Record]) -> int:
        assert self._out is not None, "open() first"
        undecodable = 0
        lines = []
        for msg in messages:
            line, decoded = jsonl_line(self._decode, msg, self._surfaces, self._opener)
            lines.append(line)
            undecodable += not decoded
        self._out.write(b"".join(lines))
        return undecodable

    def sync(self) -> int:
        assert self._out is not None, "open() first"
        self._out.flush()
        os.fsync(self._out.fileno())
        return self._out.tell()

    def finish(self) -> None:
        self.sync()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def jsonl_line(
    decode: TurnEventDeserializer,
    msg: Record,
    surfaces: Redaction = DROPPED,
    opener: TurnOpener | None = None,
) -> tuple[bytes, bool]:
    """One canonical JSON line: where the message was, and its event (or why it is not one),
    its surfaces and tool I/O as ``surfaces`` lets them through (a sealed turn opened by
    ``opener`` first; without one its sealed fields are as written, empty)."""
    where: JsonlLine = {"partition": msg.partition(), "offset": msg.offset()}
    try:
        decoded = decode(msg.value())
    except Exception as exc:  # the decoder raises several types; the line records which
        where["error"] = f"{type(exc).__name__}: {exc}"
        return canonical_json(where) + b"\n", False
    where["writer_version"] = decoded.writer_version
    # occurred_at as the ISO time replay lines have always held (decoded: epoch ms).
    if opener is not None:
        opener(decoded.event)
    event = surfaces.event(decoded.event)  # a copy of its own: changed in place
    event["occurred_at"] = occurred_moment(event["occurred_at"])
    where["event"] = event
    return canonical_json(where) + b"\n", True
