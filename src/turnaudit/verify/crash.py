"""Where each announced stream ended, against what the range holds: a crash is
measured to the turn. Pure: no I/O.

A publisher writes each stream's head (last sequence handed on) to local disk
every head interval; a clean close announces its streams as ended there, a
successor on the same spool directory announces a crashed predecessor's last
written heads as cut (``<prefix>stream-heads``). For each announced stream,
``lost_in_crash`` is the announced head's sequence minus the last sequence
the range holds: turns the publisher handed on (accepted by ``publish()``)
that never reached the stream. It is exact up to the turns handed on in the
last head interval before the crash (those have no head on disk: never
over-counted, possibly under-counted by that interval's turns).

A live publisher also announces its open streams' heads and its liveness every liveness
interval (``turnaudit.stream_heads``). A stream whose last announcement is ``open`` goes
on, unless its producer has **vanished** (silent past the bound without its closing note,
and no successor announced it cut): then the turns its open head says were handed on and
the range does not hold are lost with it (``lost_vanished``, exact up to the turns of its
last liveness interval).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from turnaudit.identity import StreamId
from turnaudit.stream_heads import (
    HeadAnnouncement,
    Liveness,
    decode_announcement,
    decode_heads_record,
)
from turnaudit.verify.findings import EXAMPLES, Finding, stream_where


class StreamEndJson(TypedDict):
    session_id: str
    producer_id: str
    status: Literal["ended", "cut", "vanished"]
    announced_sequence: int
    last_seen: int | None
    lost_in_crash: int  # cut or ended: turns handed on, never on the stream
    lost_vanished: int  # vanished: turns its last open head says were handed on, never seen


class VanishedJson(TypedDict):
    producer_id: str
    silent_s: float
    interval_ms: int
    open_streams: int
    lost: int


class StreamEndsJson(TypedDict):
    announced: int
    ended_cleanly: int
    cut: int
    lost_in_crash: int
    # streams still open (their producer alive) and the producers vanished, with their
    # open streams and turns lost
    open: int
    vanished: list[VanishedJson]
    lost_vanished: int
    # announced streams the range does not hold (read from a later start), or whose
    # end it does not reach (a range that ends before now)
    not_in_range: int
    head_interval_ms: int
    bound: str
    cut_streams: list[StreamEndJson]


BOUND = (
    "lost_in_crash counts turns publish() accepted that never reached the stream, up to "
    "the publisher's last head write: turns handed on in the last head interval before a "
    "crash are not counted (never over-counted); lost_vanished the same up to a vanished "
    "producer's last liveness announcement"
)


@dataclass
class StreamEnds:
    # Each stream cut by a crash or missing turns (a million streams that ended cleanly
    # with every turn present are only counted, in ``ended_whole``).
    streams: list[StreamEndJson] = field(default_factory=list)
    ended_whole: int = 0
    not_in_range: int = 0
    head_interval_ms: int = 0
    open: int = 0
    vanished: dict[str, VanishedJson] = field(default_factory=dict)

    @property
    def lost_in_crash(self) -> int:
        return sum(s["lost_in_crash"] for s in self.streams)

    @property
    def lost_vanished(self) -> int:
        return sum(s["lost_vanished"] for s in self.streams)

    def findings(self) -> list[Finding]:
        found = []
        for s in self.streams:
            lost = s["lost_in_crash"] or s["lost_vanished"]
            if lost <= 0:
                continue
            where = stream_where((s["session_id"], s["producer_id"]))
            where["position"] = s["announced_sequence"]
            how = {
                "cut": "was cut by a crash",
                "ended": "ended cleanly",
                "vanished": "was open when its producer vanished",
            }[s["status"]]
            seen = "nothing" if s["last_seen"] is None else f"position {s['last_seen']}"
            found.append(
                Finding(
                    "lost_vanished" if s["status"] == "vanished" else "lost_in_crash",
                    f"the stream {how} at position {s['announced_sequence']}; the "
                    f"range holds {seen}: {lost} turn(s) never on the stream",
                    where,
                )
            )
        return found

    def as_json(self) -> StreamEndsJson:
        cut = [s for s in self.streams if s["status"] == "cut"]
        return StreamEndsJson(
            announced=len(self.streams) + self.ended_whole + self.not_in_range,
            ended_cleanly=self.ended_whole + sum(1 for s in self.streams if s["status"] == "ended"),
            cut=len(cut),
            lost_in_crash=self.lost_in_crash,
            open=self.open,
            vanished=sorted(self.vanished.values(), key=lambda v: v["producer_id"]),
            lost_vanished=self.lost_vanished,
            not_in_range=self.not_in_range,
            head_interval_ms=self.head_interval_ms,
            bound=BOUND,
            cut_streams=cut[: EXAMPLES * 5],
        )


class LatestAnnouncements:
    """The last announcement of each stream (what the compacted topic keeps), in stream
    order, held in a private SQLite temporary file: a page cache in memory whatever the
    number of streams announced (a million streams' announcements as Python objects
    were half a GiB). Fill it in offset order; the last one added for a stream wins."""

    def __init__(self) -> None:
        # "": a temporary database of this connection's alone, on disk once it outgrows
        # its cache, removed when closed. Filled on one thread, read on another.
        self._db = sqlite3.connect("", check_same_thread=False)
        self._db.execute(
            "CREATE TABLE latest (session TEXT NOT NULL, producer TEXT NOT NULL, "
            "note BLOB NOT NULL, PRIMARY KEY (session, producer)) WITHOUT ROWID"
        )
        # Each producer's last liveness record (few: one per publisher process).
        self.liveness: dict[str, Liveness] = {}

    def add_values(self, values: Iterable[bytes | None]) -> None:
        """Records of the stream-heads topic: heads and liveness; anything else skipped."""

        def heads() -> Iterator[tuple[HeadAnnouncement, bytes]]:
            for value in values:
                if value is None:
                    continue
                note = decode_heads_record(value)
                if isinstance(note, HeadAnnouncement):
                    yield note, value
                elif note is not None:
                    self.liveness[note.producer_id] = note

        notes = heads()
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO latest VALUES (?, ?, ?)",
                ((note.head.session_id, note.head.producer_id, value) for note, value in notes),
            )

    @classmethod
    def of(cls, announcements: Iterable[HeadAnnouncement]) -> LatestAnnouncements:
        latest = cls()
        latest.add_values(note.encode() for note in announcements)
        return latest

    def __iter__(self) -> Iterator[HeadAnnouncement]:
        """Each stream's last announcement, by stream (session, then producer: SQLite
        compares texts as UTF-8 bytes, the order Python sorts them in)."""
        for (value,) in self._db.execute("SELECT note FROM latest ORDER BY session, producer"):
            note = decode_announcement(value)
            assert note is not None  # only announcements are stored
            yield note

    def close(self) -> None:
        self._db.close()


def stream_ends(
    announcements: Iterable[HeadAnnouncement],
    seen: Mapping[StreamId, int],
    *,
    whole_stream: bool,
    to_end: bool = True,
    now_ms: int | None = None,
) -> StreamEnds:
    """Compare announced heads with the last position ``seen`` per stream. A stream the
    range does not hold counts as wholly lost only when the range is the whole stream
    (read from offset 0); otherwise it is counted as not in the range. A range that
    ends before now (``to_end`` False) cannot tell a cut stream from one that goes on
    after it: every announced stream is counted as not in the range. A producer is
    judged vanished at ``now_ms`` (default: now)."""
    latest = (
        announcements
        if isinstance(announcements, LatestAnnouncements)
        else LatestAnnouncements.of(announcements)
    )
    now = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        return _ends(latest, seen, whole_stream=whole_stream, to_end=to_end, now_ms=now)
    finally:
        latest.close()


def _ends(
    latest: LatestAnnouncements,
    seen: Mapping[StreamId, int],
    *,
    whole_stream: bool,
    to_end: bool,
    now_ms: int,
) -> StreamEnds:
    out = StreamEnds()
    for note in latest:
        stream = note.head.stream
        out.head_interval_ms = max(out.head_interval_ms, note.interval_ms)
        last = seen.get(stream)
        if not to_end or (last is None and not whole_stream):
            out.not_in_range += 1
            continue
        lost = note.head.sequence - (-1 if last is None else last)
        status = note.status
        if status == "open":
            alive = latest.liveness.get(stream[1])
            if alive is None or not alive.vanished(now_ms):
                out.open += 1  # goes on: nothing to judge yet
                continue
            gone = out.vanished.setdefault(
                alive.producer_id,
                VanishedJson(
                    producer_id=alive.producer_id,
                    silent_s=alive.silent_ms(now_ms) / 1000,
                    interval_ms=alive.interval_ms,
                    open_streams=0,
                    lost=0,
                ),
            )
            gone["open_streams"] += 1
            gone["lost"] += max(0, lost)
        elif status == "ended" and lost <= 0:
            out.ended_whole += 1
            continue
        out.streams.append(
            StreamEndJson(
                session_id=stream[0],
                producer_id=stream[1],
                status="vanished" if status == "open" else status,
                announced_sequence=note.head.sequence,
                last_seen=last,
                lost_in_crash=0 if status == "open" else max(0, lost),
                lost_vanished=max(0, lost) if status == "open" else 0,
            )
        )
    return out
