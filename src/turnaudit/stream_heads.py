"""Stream heads: where each of a publisher's ordered streams stood, as the
publisher recorded it on local disk and as it is announced on the compacted
``<prefix>stream-heads`` topic (keyed by stream). Pure: the record format only.

A head is (session id, producer id, last sequence handed on, its chain hash), announced
with one of three statuses (``HeadAnnouncement.status``):

* ``open``: a live publisher's steady announcement, every liveness interval, of the
  heads that advanced since its last one: the stream goes on past it;
* ``ended``: the publisher closed cleanly: the stream ended there;
* ``cut``: a successor on the same spool directory announces the heads a crashed
  predecessor last wrote (the stream was cut there or later: turns of the last head
  interval may be missing from the count).

Beside the heads, each publisher keeps one **liveness** record (``Liveness``, keyed by
producer): when it last announced, at what interval, and whether it closed. A producer
silent past ``VANISHED_AFTER_INTERVALS`` intervals (plus ``VANISHED_SLACK_MS``) without
its closing note has **vanished** (``Liveness.vanished``): killed, or rescheduled onto an
empty volume where no successor finds its heads; its open streams' announced heads say
how many turns it handed on, at the least.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

import orjson

HeadStatus = Literal["open", "ended", "cut"]
# A liveness record's key: never a stream's (a stream's key starts with its session id).
LIVENESS_KEY_PREFIX = b"\x00liveness\x00"
# A producer is vanished once silent this many of its intervals, plus the slack (clocks,
# scheduling), without its closing note.
VANISHED_AFTER_INTERVALS = 3
VANISHED_SLACK_MS = 5_000


@dataclass(frozen=True, slots=True)
class StreamHead:
    session_id: str
    producer_id: str
    sequence: int  # last position handed to librdkafka or the spool
    hash: str  # its chain hash

    @property
    def stream(self) -> tuple[str, str]:
        return (self.session_id, self.producer_id)


@dataclass(frozen=True, slots=True)
class HeadAnnouncement:
    head: StreamHead
    ended: bool  # closed cleanly (True) or, unless open, cut by a crash (False)
    interval_ms: int  # the head-write interval of the publisher that wrote it
    announced_by: str  # producer id of the announcing publisher
    open: bool = False  # a live publisher's steady announcement: the stream goes on
    # What the stream's last turn carried: its pack id and its runtime's name ("" in
    # records written before they were announced), so a reader counting the stream's
    # lost turns can say whose they were without having kept them per stream.
    pack: str = ""
    runtime: str = ""

    @property
    def status(self) -> HeadStatus:
        return "ended" if self.ended else "open" if self.open else "cut"

    def key(self) -> bytes:
        return f"{self.head.session_id}\x00{self.head.producer_id}".encode()

    def encode(self) -> bytes:
        fields: dict[str, object] = {
            **asdict(self.head),
            "ended": self.ended,
            "interval_ms": self.interval_ms,
            "announced_by": self.announced_by,
        }
        if self.open:  # records before liveness have no such field: cut or ended
            fields["open"] = True
        if self.pack:
            fields["pack"] = self.pack
        if self.runtime:
            fields["runtime"] = self.runtime
        return json.dumps(fields, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Liveness:
    """A publisher's liveness: when it last announced (its clock, epoch ms), every how
    long it announces, and whether it closed cleanly (its final note)."""

    producer_id: str
    at_ms: int
    interval_ms: int
    closed: bool

    def key(self) -> bytes:
        return LIVENESS_KEY_PREFIX + self.producer_id.encode()

    def encode(self) -> bytes:
        return json.dumps(
            {"liveness": 1, **asdict(self)}, separators=(",", ":"), sort_keys=True
        ).encode()

    def silent_ms(self, now_ms: int) -> int:
        return max(0, now_ms - self.at_ms)

    def vanished(self, now_ms: int) -> bool:
        """Silent past the bound without its closing note."""
        bound = VANISHED_AFTER_INTERVALS * self.interval_ms + VANISHED_SLACK_MS
        return not self.closed and self.silent_ms(now_ms) > bound


def _parsed(value: bytes | str | None) -> object:
    """The record's JSON (orjson: the heads topic holds a record per stream, read whole at
    every pass), or None when it is not JSON."""
    if value is None:
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:  # also invalid UTF-8 and integers past 64 bits
        return None


def _liveness_of(data: object) -> Liveness | None:
    if not isinstance(data, dict) or data.get("liveness") != 1:
        return None
    try:
        return Liveness(
            str(data["producer_id"]),
            int(data["at_ms"]),
            int(data["interval_ms"]),
            bool(data["closed"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _announcement_of(data: object) -> HeadAnnouncement | None:
    if not isinstance(data, dict):
        return None
    try:
        head = StreamHead(
            str(data["session_id"]),
            str(data["producer_id"]),
            int(data["sequence"]),
            str(data["hash"]),
        )
        return HeadAnnouncement(
            head,
            bool(data["ended"]),
            int(data["interval_ms"]),
            str(data["announced_by"]),
            open=bool(data.get("open", False)),
            pack=str(data.get("pack", "")),
            runtime=str(data.get("runtime", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None


def decode_liveness(value: bytes | str | None) -> Liveness | None:
    """A liveness record, or None for a record that is not one (never raises)."""
    return _liveness_of(_parsed(value))


def decode_announcement(value: bytes | str | None) -> HeadAnnouncement | None:
    """An announcement, or None for a record that is not one (never raises)."""
    return _announcement_of(_parsed(value))


def decode_heads_record(value: bytes | str | None) -> HeadAnnouncement | Liveness | None:
    """Whichever of the two the record is (parsed once), or None (never raises)."""
    data = _parsed(value)
    return _announcement_of(data) or _liveness_of(data)
