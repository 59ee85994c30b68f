"""A bounded, append-only on-disk spool for messages the broker cannot take now.

Records are kept in order in segment files; ``read`` returns the oldest ones
(each with the position after it) and ``commit`` moves a persisted cursor past
them, deleting segments that are fully drained, the last one included.

* Every append is one ``write`` system call of a whole record on an unbuffered
  file: it reaches the OS before ``append`` returns (it survives a crash of the
  process); ``fsync=True`` also makes it survive a crash of the machine, at a
  much higher cost per event.
* A failed write (disk full, I/O error) is cut back off the file at once and
  raised as ``SpoolWriteError``: the spool holds whole records only and stays
  usable, so appends succeed again as soon as space is back.
* The bound (``max_bytes``) refuses with ``SpoolFullError``.
* The cursor is rewritten in place (no new disk block), so a drain moves it
  even on a full disk; should that fail it is kept in memory and saved at the
  next commit: a crash in between repeats records, never loses them.
* Reading does not hold the lock appends take: it reads up to the end it saw,
  so a drain never delays the caller that appends.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from turnaudit.errors import ConfigurationError, PublishError, SpoolFullError, SpoolWriteError
from turnaudit.files import open_private, private_dir

log = structlog.get_logger("turnaudit.spool")

_LEN = struct.Struct(">I")
_RECORD = struct.Struct(">HIIId")  # topic, key, value, headers lengths; appended at (unix s)
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


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """A spooled message, when it was spooled, and the spool position after it."""

    message: SpooledMessage
    appended_at: float
    end: SpoolPosition


class DiskSpool:
    def __init__(self, directory: Path, *, max_bytes: int = 1 << 30, fsync: bool = False) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._fsync = fsync
        self._lock = threading.Lock()
        private_dir(directory)
        self._cursor_file = directory / "cursor"
        self._cursor_dirty = False
        self._read = self._load_cursor()
        self._save_cursor()  # the cursor's disk block is taken now, while there is room
        segments = self._segments()
        if segments:
            self._cut_torn_tail(self._path(segments[-1]))
        self._write_segment = segments[-1] if segments else max(self._read.segment, 1)
        self._fd: int | None = None
        self._write_offset = (
            self._path(self._write_segment).stat().st_size
            if self._path(self._write_segment).exists()
            else 0
        )
        self._bytes = sum(self._path(s).stat().st_size for s in segments) - self._read.offset
        # What was spooled when the spool was opened, per topic (the publisher
        # counts its own events from here on).
        self.pending_by_topic: Counter[str] = Counter()
        self._count, self._oldest = self._scan_pending()

    # -- writing -------------------------------------------------------------
    def append(self, topic: str, key: bytes, value: bytes, headers: Headers | None = None) -> None:
        """Append one record, whole or not at all."""
        now = time.time()
        record = _frame(SpooledMessage(topic, key, value, headers), now)
        with self._lock:
            if self._bytes + len(record) > self.max_bytes:
                raise SpoolFullError(
                    f"spool {self.directory} is full ({self._bytes} of {self.max_bytes} bytes)"
                )
            try:
                fd = self._current_fd()
                rest = memoryview(record)
                while rest:  # a short write means the disk filled: the next one says so
                    rest = rest[os.write(fd, rest) :]
                if self._fsync:
                    os.fsync(fd)
            except OSError as exc:
                self._cut_back()
                raise SpoolWriteError(
                    f"spool {self.directory} cannot be written: {exc.strerror or exc}"
                ) from exc
            self._write_offset += len(record)
            self._bytes += len(record)
            if self._count == 0:
                self._oldest = now
            self._count += 1
            if self._write_offset >= _SEGMENT_BYTES:
                self._close_fd()
                self._write_segment += 1
                self._write_offset = 0

    def _current_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(
                self._path(self._write_segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
            )
        return self._fd

    def _cut_back(self) -> None:
        """After a failed write, cut the file back to its last whole record (the
        descriptor stays open: the next append on a still-full disk costs one
        failing write, not an open and a close as well)."""
        if self._fd is None:
            return  # the file did not even open: nothing was written
        try:
            os.ftruncate(self._fd, self._write_offset)
        except OSError as exc:  # the next open cuts a torn tail anyway
            log.error(
                "spool_truncate_failed", path=str(self._path(self._write_segment)), error=str(exc)
            )
            self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading -------------------------------------------------------------
    def read(self, limit: int = 1000) -> list[SpoolRecord]:
        """The oldest spooled records (at most ``limit``), each with the position after it."""
        with self._lock:
            start, end = self._read, SpoolPosition(self._write_segment, self._write_offset)
        return self._read_range(start, end, limit)

    def read_batch(self, limit: int = 1000) -> tuple[list[SpooledMessage], SpoolPosition]:
        """The oldest spooled messages (at most ``limit``) and the position after them."""
        records = self.read(limit)
        with self._lock:
            position = records[-1].end if records else self._read
        return [r.message for r in records], position

    def _read_range(
        self, start: SpoolPosition, end: SpoolPosition, limit: int
    ) -> list[SpoolRecord]:
        out: list[SpoolRecord] = []
        segment, offset = start.segment, start.offset
        while len(out) < limit and (segment, offset) < (end.segment, end.offset):
            path = self._path(segment)
            stop = end.offset if segment == end.segment else None
            try:
                fh = open(path, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                if segment >= end.segment:
                    break
                segment, offset = segment + 1, 0
                continue
            with fh:
                fh.seek(offset)
                while len(out) < limit and (stop is None or offset < stop):
                    head = fh.read(_LEN.size)
                    if len(head) < _LEN.size:
                        break
                    (size,) = _LEN.unpack(head)
                    body = fh.read(size)
                    if len(body) < size:  # a torn write at a crash: the tail is ignored
                        break
                    offset = fh.tell()
                    message, appended_at = _decode(body)
                    out.append(SpoolRecord(message, appended_at, SpoolPosition(segment, offset)))
            if len(out) < limit and segment < end.segment:
                segment, offset = segment + 1, 0
            else:
                break
        return out

    def requeue_front(self, messages: list[SpooledMessage]) -> None:
        """Put ``messages`` before everything spooled: they are older (a closing
        publisher hands back its client queue). The rewritten spool is synced to
        disk before the cursor moves to it; a crash in between repeats messages
        (same event ids), never loses them. Raises ``SpoolWriteError`` (and
        leaves the spool as it was) when the disk cannot take them."""
        if not messages:
            return
        with self._lock:
            pending = self._read_range(
                self._read, SpoolPosition(self._write_segment, self._write_offset), 1 << 62
            )
            self._close_fd()
            segment = self._write_segment + 1
            path = self._path(segment)
            now = time.time()
            try:
                with open_private(path, "wb") as fh:
                    for message in messages:
                        fh.write(_frame(message, now))
                    for record in pending:
                        fh.write(_frame(record.message, record.appended_at))
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                path.unlink(missing_ok=True)
                raise SpoolWriteError(
                    f"spool {self.directory} cannot be written: {exc.strerror or exc}"
                ) from exc
            old_read = self._read
            self._read = SpoolPosition(segment, 0)
            if not self._save_cursor():
                path.unlink(missing_ok=True)
                self._read = old_read
                raise SpoolWriteError(f"spool cursor {self._cursor_file} cannot be written")
            for old in self._segments():
                if old < segment:
                    self._path(old).unlink()
            self._write_segment = segment
            self._write_offset = path.stat().st_size
            self._count = len(messages) + len(pending)
            self._bytes = self._write_offset
            self._oldest = now if not pending else min(now, pending[0].appended_at)

    def commit(self, position: SpoolPosition, delivered: int) -> None:
        """Forget everything before ``position`` (those ``delivered`` records went out)."""
        with self._lock:
            if delivered > self._count:
                raise PublishError(
                    f"spool {self.directory}: commit of {delivered} records, {self._count} held"
                )
            for segment in self._segments():
                if segment < position.segment:
                    self._unlink(segment)
            self._read = position
            self._count -= delivered
            if self._count == 0:
                # Fully drained: the files go, the next append starts a fresh segment.
                self._close_fd()
                for segment in self._segments():
                    self._unlink(segment)
                self._write_segment = max(self._write_segment, position.segment) + 1
                self._write_offset = 0
                self._read = SpoolPosition(self._write_segment, 0)
            self._save_cursor()
            self._bytes = self._size_after(self._read)
            self._oldest = self._first_time() if self._count else None

    def _unlink(self, segment: int) -> None:
        try:
            self._path(segment).unlink(missing_ok=True)
        except OSError as exc:
            log.error("spool_segment_not_removed", segment=segment, error=str(exc))

    def _size_after(self, position: SpoolPosition) -> int:
        total = 0
        for segment in self._segments():
            size = self._path(segment).stat().st_size
            total += size - position.offset if segment == position.segment else size
        return max(0, total)

    def _first_time(self) -> float | None:
        first = self._read_range(
            self._read, SpoolPosition(self._write_segment, self._write_offset), 1
        )
        return first[0].appended_at if first else None

    def __len__(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def oldest_appended_at(self) -> float | None:
        """When the oldest record still spooled was appended (unix seconds), or None."""
        return self._oldest

    def close(self) -> None:
        with self._lock:
            self._close_fd()
            if self._cursor_dirty:
                self._save_cursor()

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

    def _save_cursor(self) -> bool:
        """Persist the read position, in place: a fixed-width line rewritten over
        itself needs no new disk block, so it is saved even on a full disk. If
        it still fails it is kept in memory and saved at the next chance."""
        line = f"{self._read.segment:020d} {self._read.offset:020d}\n".encode()
        try:
            fd = os.open(self._cursor_file, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                if os.pwrite(fd, line, 0) != len(line):
                    raise OSError(28, "short write of the spool cursor")
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if not self._cursor_dirty:
                log.warning("spool_cursor_not_saved", path=str(self._cursor_file), error=str(exc))
            self._cursor_dirty = True
            return False
        self._cursor_dirty = False
        return True

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

    def _scan_pending(self) -> tuple[int, float | None]:
        records = self._read_range(
            self._read, SpoolPosition(self._write_segment, self._write_offset), 1 << 62
        )
        for record in records:
            self.pending_by_topic[record.message.topic] += 1
        return len(records), (records[0].appended_at if records else None)


def _frame(message: SpooledMessage, appended_at: float) -> bytes:
    """Length-prefixed record: lengths of topic, key, value, headers, the time, then the bytes."""
    t = message.topic.encode()
    h = json.dumps([[k, v.hex()] for k, v in message.headers]).encode() if message.headers else b""
    body = _RECORD.pack(len(t), len(message.key), len(message.value), len(h), appended_at)
    body += t + message.key + message.value + h
    return _LEN.pack(len(body)) + body


def _decode(record: bytes) -> tuple[SpooledMessage, float]:
    tlen, klen, vlen, hlen, appended_at = _RECORD.unpack_from(record)
    at = _RECORD.size
    topic = record[at : at + tlen].decode()
    at += tlen
    key, value = record[at : at + klen], record[at + klen : at + klen + vlen]
    at += klen + vlen
    raw = record[at : at + hlen]
    headers = [(k, bytes.fromhex(v)) for k, v in json.loads(raw)] if raw else None
    return SpooledMessage(topic, key, value, headers), appended_at


def open_spool(directory: Path, max_bytes: int) -> DiskSpool:
    """The spool, or one line saying why its folder cannot be used."""
    try:
        spool = DiskSpool(directory, max_bytes=max_bytes)
        probe = directory / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigurationError(
            f"spool directory {directory} is not usable ({exc.strerror or exc}): "
            "choose a writable folder (--spool-dir)"
        ) from None
    return spool


def as_bytes(data: str | bytes | None) -> bytes:
    if data is None:
        return b""
    return data.encode() if isinstance(data, str) else data


def bytes_headers(
    headers: Sequence[tuple[str, str | bytes | None]] | None,
) -> list[tuple[str, bytes]] | None:
    """Headers as the spool keeps them: (name, bytes) pairs, None for none."""
    if not headers:
        return None
    return [(k, v if isinstance(v, bytes) else (v or "").encode()) for k, v in headers]
