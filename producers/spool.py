"""A bounded, append-only on-disk spool for messages the broker cannot take now.

Records are kept in order in segment files; ``read_batch`` returns the oldest
ones and ``commit`` moves a persisted cursor past them, deleting segments that
are fully drained. A process that stops with records spooled leaves them for
the next publisher on the same folder. Appends reach the OS on every call (they
survive a crash of the process); ``fsync=True`` also makes them survive a crash
of the machine, at a much higher cost per event.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from turnaudit.errors import PublishError, SpoolFullError

_LEN = struct.Struct(">I")
_RECORD = struct.Struct(">HIII")  # topic, key, value, headers lengths
Headers = list[tuple[str, bytes]]
_SEGMENT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SpooledMessage:
    topic: str
    key: bytes
    value: bytes
    headers: Headers | None = None


@dataclass(frozen=True, slots=True)
class SpoolPosition:
    segment: int
    offset: int


class DiskSpool:
    def __init__(self, directory: Path, *, max_bytes: int = 1 << 30, fsync: bool = False) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._fsync = fsync
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self._cursor_file = directory / "cursor"
        self._read = self._load_cursor()
        segments = self._segments()
        if segments:
            self._cut_torn_tail(self._path(segments[-1]))
        self._write_segment = segments[-1] if segments else max(self._read.segment, 1)
        self._writer: BinaryIO | None = None
        self._bytes = sum(self._path(s).stat().st_size for s in segments) - self._read.offset
        self._count = self._count_pending()

    # -- writing -------------------------------------------------------------
    def append(
        self, topic: str, key: bytes, value: bytes, headers: Headers | None = None
    ) -> None:
        record = _frame(SpooledMessage(topic, key, value, headers))
        with self._lock:
            if self._bytes + len(record) > self.max_bytes:
                raise SpoolFullError(
                    f"spool {self.directory} is full ({self._bytes} of {self.max_bytes} bytes); "
                    "the event was not accepted"
                )
            writer = self._current_writer()
            writer.write(record)
            writer.flush()
            if self._fsync:
                os.fsync(writer.fileno())
            self._bytes += len(record)
            self._count += 1
            if writer.tell() >= _SEGMENT_BYTES:
                writer.close()
                self._writer = None
                self._write_segment += 1

    def _current_writer(self) -> BinaryIO:
        if self._writer is None:
            self._writer = open(self._path(self._write_segment), "ab")  # noqa: SIM115 - kept open across appends
        return self._writer

    # -- reading -------------------------------------------------------------
    def read_batch(self, limit: int = 1000) -> tuple[list[SpooledMessage], SpoolPosition]:
        """The oldest spooled messages (at most ``limit``) and the position after them."""
        with self._lock:
            return self._read_unlocked(limit)

    def requeue_front(self, messages: list[SpooledMessage]) -> None:
        """Put ``messages`` before everything spooled: they are older (a closing
        publisher hands back its client queue). The rewritten spool is synced to
        disk before the cursor moves to it; a crash in between repeats messages
        (same event ids), never loses them."""
        if not messages:
            return
        with self._lock:
            pending, _ = self._read_unlocked(limit=1 << 62)
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            segment = self._write_segment + 1
            with open(self._path(segment), "wb") as fh:
                for message in [*messages, *pending]:
                    fh.write(_frame(message))
                fh.flush()
                os.fsync(fh.fileno())
            self._read = SpoolPosition(segment, 0)
            self._save_cursor()
            for old in self._segments():
                if old < segment:
                    self._path(old).unlink()
            self._write_segment = segment
            self._count = len(messages) + len(pending)
            self._bytes = self._path(segment).stat().st_size

    def _read_unlocked(self, limit: int) -> tuple[list[SpooledMessage], SpoolPosition]:
        if self._writer is not None:
            self._writer.flush()
        out: list[SpooledMessage] = []
        segment, offset = self._read.segment, self._read.offset
        while len(out) < limit:
            path = self._path(segment)
            if not path.exists():
                break
            with open(path, "rb") as fh:
                fh.seek(offset)
                while len(out) < limit:
                    head = fh.read(_LEN.size)
                    if len(head) < _LEN.size:
                        break
                    (size,) = _LEN.unpack(head)
                    record = fh.read(size)
                    if len(record) < size:  # a torn write at a crash: the tail is ignored
                        break
                    out.append(_decode(record))
                    offset = fh.tell()
            if len(out) < limit and segment < self._write_segment:
                segment, offset = segment + 1, 0
            else:
                break
        return out, SpoolPosition(segment, offset)

    def commit(self, position: SpoolPosition, delivered: int) -> None:
        """Forget everything before ``position`` (those ``delivered`` messages went out)."""
        with self._lock:
            for segment in self._segments():
                if segment < position.segment:
                    self._path(segment).unlink()
            self._read = position
            self._save_cursor()
            self._count -= delivered
            self._bytes = (
                sum(self._path(s).stat().st_size for s in self._segments()) - position.offset
            )
            if (
                self._count == 0
                and self._writer is None
                and position.segment == self._write_segment
            ):
                # Fully drained: start the next append in a fresh segment.
                if self._path(position.segment).exists():
                    self._path(position.segment).unlink()
                self._write_segment = position.segment + 1
                self._read = SpoolPosition(self._write_segment, 0)
                self._save_cursor()

    def __len__(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    # -- files ---------------------------------------------------------------
    def _path(self, segment: int) -> Path:
        return self.directory / f"segment-{segment:09d}.spool"

    def _segments(self) -> list[int]:
        return sorted(
            int(p.name[len("segment-") : -len(".spool")])
            for p in self.directory.glob("segment-*.spool")
        )

    def _load_cursor(self) -> SpoolPosition:
        try:
            segment, offset = self._cursor_file.read_text().split()
            return SpoolPosition(int(segment), int(offset))
        except FileNotFoundError:
            return SpoolPosition(1, 0)
        except ValueError as exc:
            raise PublishError(f"spool cursor {self._cursor_file} is corrupt: {exc}") from exc

    def _save_cursor(self) -> None:
        tmp = self._cursor_file.with_suffix(".tmp")
        tmp.write_text(f"{self._read.segment} {self._read.offset}\n")
        tmp.replace(self._cursor_file)

    @staticmethod
    def _cut_torn_tail(path: Path) -> None:
        """A crash mid-append leaves a partial record at the end: cut it off, so
        the next append is readable after the last whole record."""
        good = 0
        with open(path, "rb") as fh:
            while (head := fh.read(_LEN.size)) and len(head) == _LEN.size:
                (size,) = _LEN.unpack(head)
                if len(fh.read(size)) < size:
                    break
                good = fh.tell()
        if good < path.stat().st_size:
            os.truncate(path, good)

    def _count_pending(self) -> int:
        count = 0
        segment, offset = self._read.segment, self._read.offset
        for seg in self._segments():
            if seg < segment:
                continue
            with open(self._path(seg), "rb") as fh:
                fh.seek(offset if seg == segment else 0)
                while (head := fh.read(_LEN.size)) and len(head) == _LEN.size:
                    (size,) = _LEN.unpack(head)
                    if len(fh.read(size)) < size:
                        break
                    count += 1
        return count


def _frame(message: SpooledMessage) -> bytes:
    """Length-prefixed record: lengths of topic, key, value, headers, then the bytes."""
    t = message.topic.encode()
    h = (
        json.dumps([[k, v.hex()] for k, v in message.headers]).encode()
        if message.headers
        else b""
    )
    body = _RECORD.pack(len(t), len(message.key), len(message.value), len(h))
    body += t + message.key + message.value + h
    return _LEN.pack(len(body)) + body


def _decode(record: bytes) -> SpooledMessage:
    tlen, klen, vlen, hlen = _RECORD.unpack_from(record)
    at = _RECORD.size
    topic = record[at : at + tlen].decode()
    at += tlen
    key, value = record[at : at + klen], record[at + klen : at + klen + vlen]
    at += klen + vlen
    raw = record[at : at + hlen]
    headers = [(k, bytes.fromhex(v)) for k, v in json.loads(raw)] if raw else None
    return SpooledMessage(topic, key, value, headers)
