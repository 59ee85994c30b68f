"""Stream heads on local disk, beside the spool: a crash is measured to the turn.

``HeadsFile`` keeps ``<spool_dir>/heads.jsonl``: a header line (producer id,
head interval), then lines of stream heads (session, producer id, last
sequence handed on, its chain hash), appended by the publisher's own
background thread every ``interval_s`` with what changed since (one ``write``
per interval; ``publish()`` only puts the head in a dict under the lock it
already holds). A clean close appends the final heads and an ``ended`` line.

On start, a predecessor's file is renamed to ``heads-<ns>.pending``; the
background thread announces every pending file's heads on the compacted
``<prefix>stream-heads`` topic (``ended`` True when the file had its ended
line, False when the predecessor was cut by a crash) and deletes the file
once the broker acknowledged them all; retried until then.

Liveness: every ``liveness_interval_s`` (``TURNAUDIT_LIVENESS_INTERVAL_S``, default 10 s;
the first at start) the same thread announces, without waiting for the broker, the heads
that advanced since its last announcement as ``open`` and the publisher's ``Liveness``
record; a clean close announces the heads ``ended`` and the liveness ``closed``. A
publisher killed and never restarted (or restarted on an empty volume) stops announcing:
readers judge it vanished once silent past the bound ``turnaudit.stream_heads`` states,
and count its open streams' announced turns that never reached the stream.

With a signing key, the same thread also feeds the publisher's ``Checkpointer``
(``turnaudit.producers.checkpointer``): the heads that changed, and the count of turns
``publish()`` handed on (it wakes the thread early once a checkpoint's count of turns is
reached).

Reading tolerates a torn tail: lines are taken up to the first one that does
not parse (a crash mid-write cuts there); reading never raises on content.
Bound: a crash loses at most the head writes of the last interval, so a
``lost_in_crash`` count derived from the heads is exact up to the turns
handed on in the last ``interval_s`` before the crash (it never over-counts).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from turnaudit.files import private_fd
from turnaudit.kafka.producer import DeliveredMessage, DeliveryError, KafkaProducer
from turnaudit.producers.checkpointer import Checkpointer
from turnaudit.producers.producer_config import env_seconds
from turnaudit.stream_heads import HeadAnnouncement, Liveness, StreamHead
from turnaudit.topic_names import TopicNames

log = structlog.get_logger("turnaudit.publisher")

HEADS_FILE = "heads.jsonl"
DEFAULT_HEAD_INTERVAL_S = 0.2
DEFAULT_LIVENESS_INTERVAL_S = 10.0
ANNOUNCE_RETRY_S = 5.0
# The background thread's announcements wait for the cluster in slices this long, so that
# close() (which sets the thread's stop) is never held by a cluster that does not answer.
FLUSH_SLICE_S = 0.1

Stream = tuple[str, str]
# What publish() records of a stream's last turn: its sequence, its chain hash, and what the
# announcements name the stream's lost turns by (the turn's pack id, its runtime's name).
DirtyHead = tuple[int, str, str, str]


@dataclass
class RecordedHeads:
    """What one heads file says."""

    producer_id: str = ""
    interval_ms: int = 0
    heads: dict[Stream, StreamHead] = field(default_factory=dict)
    labels: dict[Stream, tuple[str, str]] = field(default_factory=dict)  # (pack, runtime)
    ended: bool = False
    lines: int = 0  # whole lines read (a torn tail is not counted)


def read_heads(path: Path) -> RecordedHeads:
    """The heads of a file, up to its first line that does not parse."""
    out = RecordedHeads()
    try:
        data = path.read_bytes()
    except OSError:
        return out
    # The part after the last newline is a torn write (or nothing): never read.
    for raw in data.split(b"\n")[:-1]:
        try:
            line = json.loads(raw)
            if not isinstance(line, dict):
                break
            if "header" in line:
                out.producer_id = str(line["producer_id"])
                out.interval_ms = int(line["interval_ms"])
            elif "ended" in line:
                out.ended = True
            else:
                head = StreamHead(str(line["s"]), str(line["p"]), int(line["q"]), str(line["h"]))
                out.heads[head.stream] = head
                out.labels[head.stream] = (str(line.get("k", "")), str(line.get("r", "")))
        except (ValueError, KeyError, TypeError):
            break  # torn: cut back here
        out.lines += 1
    return out


def head_line(head: StreamHead, pack: str = "", runtime: str = "") -> bytes:
    line: dict[str, object] = {
        "s": head.session_id,
        "p": head.producer_id,
        "q": head.sequence,
        "h": head.hash,
    }
    if pack:
        line["k"] = pack
    if runtime:
        line["r"] = runtime
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def announcement(
    head: StreamHead,
    labels: tuple[str, str] | None,
    *,
    ended: bool,
    interval_ms: int,
    announced_by: str,
    open: bool = False,
) -> HeadAnnouncement:
    pack, runtime = labels or ("", "")
    return HeadAnnouncement(
        head, ended, interval_ms, announced_by, open=open, pack=pack, runtime=runtime
    )


class HeadsFile:
    """The publisher's heads, written off the turn's path; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        producer_id: str,
        interval_s: float | None,
        lock: threading.Lock,
        announcer: KafkaProducer | None,
        prefix: str,
        checkpointer: Checkpointer | None = None,
        liveness_interval_s: float | None = None,
    ) -> None:
        # None: TURNAUDIT_HEAD_INTERVAL_S and TURNAUDIT_LIVENESS_INTERVAL_S, else defaults.
        if interval_s is None:
            interval_s = env_seconds("TURNAUDIT_HEAD_INTERVAL_S", DEFAULT_HEAD_INTERVAL_S)
        if liveness_interval_s is None:
            liveness_interval_s = env_seconds(
                "TURNAUDIT_LIVENESS_INTERVAL_S", DEFAULT_LIVENESS_INTERVAL_S
            )
        interval_s = max(interval_s, 0.001)
        self.directory = directory
        self.liveness_interval_s = liveness_interval_s
        self._unannounced: dict[Stream, StreamHead] = {}  # advanced since the last liveness
        self._next_liveness = 0.0  # the first at start
        self.liveness_announced = 0
        self.path = directory / HEADS_FILE
        self.interval_s = interval_s
        self.producer_id = producer_id
        self._lock = lock  # the publisher's: publish() fills ``dirty`` under it
        self.dirty: dict[Stream, DirtyHead] = {}
        # Turns handed on since the last head write (publish() counts them under the
        # lock); at ``wake_at`` it wakes this thread for a checkpoint (0: never).
        self.turns = 0
        self.checkpointer = checkpointer
        self.wake_at = checkpointer.max_turns if checkpointer is not None else 0
        self.wake = threading.Event()
        self._heads: dict[Stream, StreamHead] = {}
        self._labels: dict[Stream, tuple[str, str]] = {}  # (pack, runtime) per stream
        self._announcer = announcer
        self._topic = TopicNames(prefix).stream_heads
        self._closing = threading.Event()
        self.writes = 0
        self.write_errors = 0
        if self.path.exists():  # a predecessor's: announced by the thread, then deleted
            self.path.rename(directory / f"heads-{time.time_ns()}.pending")
        self._fd = private_fd(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        header = {
            "header": 1,
            "producer_id": producer_id,
            "interval_ms": round(interval_s * 1000),
            "started": time.time(),
        }
        os.write(self._fd, json.dumps(header).encode() + b"\n")
        self._thread = threading.Thread(target=self._run, name="turnaudit-heads", daemon=True)
        self._thread.start()

    # -- the background thread --------------------------------------------------------
    def _run(self) -> None:
        next_announce = 0.0
        while not self._closing.is_set():
            self.wake.wait(self.interval_s)
            self.wake.clear()
            if self._closing.is_set():
                break
            try:
                self.write_now()
                if self.checkpointer is not None:
                    self.checkpointer.tick()
                    self.wake_at = self.checkpointer.turns_left()
                if time.monotonic() >= self._next_liveness:
                    self.announce_liveness()
                if time.monotonic() >= next_announce:
                    if not self.announce_pending(stop=self._closing):
                        next_announce = time.monotonic() + ANNOUNCE_RETRY_S
                    else:
                        next_announce = float("inf")
            except Exception as exc:  # the thread outlives any error
                self.write_errors += 1
                log.error("stream_heads_write_failed", error=repr(exc))

    def write_now(self) -> None:
        """Append the heads that changed since the last write (one ``write``)."""
        with self._lock:
            dirty, self.dirty = self.dirty, {}
            turns, self.turns = self.turns, 0
        if not dirty:
            return
        lines = []
        advanced = []
        for (session, producer), (sequence, digest, pack, runtime) in dirty.items():
            head = self._heads[(session, producer)] = StreamHead(
                session, producer, sequence, digest
            )
            self._labels[(session, producer)] = (pack, runtime)
            advanced.append(head)
            lines.append(head_line(head, pack, runtime))
            self._unannounced[(session, producer)] = head
        os.write(self._fd, b"".join(lines))
        self.writes += 1
        if self.checkpointer is not None:
            self.checkpointer.advance(advanced, turns)

    def announce_liveness(self) -> None:
        """The heads advanced since the last announcement, as ``open``, and this
        publisher's liveness: handed to the producer, never waited for (a broker that is
        away delays them; its client delivers them once it is back)."""
        self._next_liveness = time.monotonic() + self.liveness_interval_s
        if self._announcer is None:
            return
        interval_ms = round(self.interval_s * 1000)
        heads, self._unannounced = self._unannounced, {}
        try:
            for stream, head in heads.items():
                note = announcement(
                    head,
                    self._labels.get(stream),
                    ended=False,
                    interval_ms=interval_ms,
                    announced_by=self.producer_id,
                    open=True,
                )
                self._announcer.produce(self._topic, note.encode(), note.key(), on_full="raise")
            value, key = self._liveness(closed=False)
            self._announcer.produce(self._topic, value, key, on_full="raise")
            self._announcer.poll(0)
            self.liveness_announced += 1
        except Exception as exc:  # a full client queue: the heads go with the next one
            self._unannounced = {**heads, **self._unannounced}
            log.warning("liveness_not_announced", error=repr(exc))

    def _liveness(self, *, closed: bool) -> tuple[bytes, bytes]:
        note = Liveness(
            self.producer_id,
            int(time.time() * 1000),
            round(self.liveness_interval_s * 1000),
            closed=closed,
        )
        return note.encode(), note.key()

    def pending_files(self) -> list[Path]:
        return sorted(self.directory.glob("heads-*.pending"))

    def announce_pending(self, timeout: float = 10.0, stop: threading.Event | None = None) -> bool:
        """Announce every predecessor's heads; True once none is left (``stop`` set: the
        wait for the cluster ends, what is not announced stays pending)."""
        for path in self.pending_files():
            recorded = read_heads(path)
            if recorded.heads and not self._announce(recorded, timeout, stop):
                return False
            path.unlink(missing_ok=True)
            log.warning(
                "stream_heads_announced",
                file=path.name,
                streams=len(recorded.heads),
                ended=recorded.ended,
                predecessor=recorded.producer_id,
            )
        return True

    def _announce(
        self, recorded: RecordedHeads, timeout: float, stop: threading.Event | None = None
    ) -> bool:
        if self._announcer is None:
            return False
        failed = []

        def report(err: DeliveryError | None, _msg: DeliveredMessage) -> None:
            if err is not None:
                failed.append(err)

        for stream, head in recorded.heads.items():
            note = announcement(
                head,
                recorded.labels.get(stream),
                ended=recorded.ended,
                interval_ms=recorded.interval_ms,
                announced_by=self.producer_id,
            )
            self._announcer.produce(self._topic, note.encode(), note.key(), on_delivery=report)
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, deadline - time.monotonic())
            left = self._announcer.flush(wait if stop is None else min(wait, FLUSH_SLICE_S))
            if left == 0 or stop is None or stop.is_set() or time.monotonic() >= deadline:
                break
        return left == 0 and not failed

    # -- close --------------------------------------------------------------------------
    def close(self, timeout: float = 5.0) -> None:
        """Final heads and the ended line; then announce them as ended (best effort:
        a successor announces them otherwise)."""
        self._closing.set()
        self.wake.set()
        self._thread.join()
        try:
            self.write_now()
            os.write(self._fd, b'{"ended":1}\n')
        finally:
            os.close(self._fd)
        if self.checkpointer is not None:
            self.checkpointer.close(timeout)
        recorded = RecordedHeads(
            self.producer_id,
            round(self.interval_s * 1000),
            dict(self._heads),
            dict(self._labels),
            ended=True,
        )
        if not recorded.heads or self._announce(recorded, timeout):
            self.path.unlink(missing_ok=True)
            if self._announcer is not None:  # the final note: closed, not vanished
                value, key = self._liveness(closed=True)
                self._announcer.produce(self._topic, value, key, on_full="raise")
                self._announcer.flush(timeout)
        self.announce_pending(timeout=min(timeout, 2.0))
