"""Stream heads: where each of a publisher's ordered streams stood, as the
publisher recorded it on local disk and as it is announced on the compacted
``<prefix>stream-heads`` topic (keyed by stream). Pure: the record format only.

A head is (session id, producer id, last sequence handed on, its chain hash).
``ended`` is True when the publisher closed cleanly (the stream ended there),
False when a successor on the same spool directory announces the heads a
crashed predecessor last wrote (the stream was cut there or later: turns of
the last head interval may be missing from the count).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


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
    ended: bool  # closed cleanly (True) or cut by a crash (False)
    interval_ms: int  # the head-write interval of the publisher that wrote it
    announced_by: str  # producer id of the announcing publisher

    def key(self) -> bytes:
        return f"{self.head.session_id}\x00{self.head.producer_id}".encode()

    def encode(self) -> bytes:
        return json.dumps(
            {
                **asdict(self.head),
                "ended": self.ended,
                "interval_ms": self.interval_ms,
                "announced_by": self.announced_by,
            },
            separators=(",", ":"),
        ).encode()


def decode_announcement(value: bytes | str | None) -> HeadAnnouncement | None:
    """An announcement, or None for a record that is not one (never raises)."""
    if value is None:
        return None
    try:
        # Text, not bytes: json's encoding detection on bytes costs a third of a small load.
        data = json.loads(value.decode() if isinstance(value, bytes) else value)
        head = StreamHead(
            str(data["session_id"]),
            str(data["producer_id"]),
            int(data["sequence"]),
            str(data["hash"]),
        )
        return HeadAnnouncement(
            head, bool(data["ended"]), int(data["interval_ms"]), str(data["announced_by"])
        )
    except (ValueError, KeyError, TypeError):
        return None
