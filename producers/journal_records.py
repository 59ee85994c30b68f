"""The journal's files: records framed ``magic | length | crc32 | payload``, an entry (a
turn to send: topic, key, value) or the indexes of entries of the same segment acknowledged.

Reading stops at the first record that is incomplete or fails its check (a torn write at
the tail, or garbage after it) and never raises: what a crash cut off is dropped, never
returned in part; a torn tail is cut back off the file so appends go on after whole records.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("turnaudit.publisher")

_MAGIC = b"TJ"
_ACKS_MAGIC = b"TA"  # acknowledged entries: their indexes in this segment
_INDEX = struct.Struct(">I")
_HEAD = struct.Struct(">2sII")  # magic, payload length, crc32 of the payload
_PAYLOAD = struct.Struct(">HI")  # topic length, key length; the value is the rest
_MAX_PAYLOAD = 64 * 1024 * 1024  # a length above this is garbage, not a record
SUFFIX = ".journal"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    topic: str
    key: bytes
    value: bytes


def frame(entry: JournalEntry) -> bytes:
    topic = entry.topic.encode()
    payload = _PAYLOAD.pack(len(topic), len(entry.key)) + topic + entry.key + entry.value
    return _HEAD.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload


def frame_acks(indexes: Sequence[int]) -> bytes:
    """A record saying the entries at ``indexes`` of its segment are acknowledged."""
    payload = b"".join(_INDEX.pack(i) for i in indexes)
    return _HEAD.pack(_ACKS_MAGIC, len(payload), zlib.crc32(payload)) + payload


def parse_records(data: bytes) -> tuple[list[JournalEntry], set[int], int]:
    """The whole records at the start of ``data``: the entries in order, the indexes
    (among those entries) acknowledged, and the length the records take; the rest (a
    torn write, garbage) is left out. Never raises."""
    entries: list[JournalEntry] = []
    acked: set[int] = set()
    at = 0
    while at + _HEAD.size <= len(data):
        magic, size, crc = _HEAD.unpack_from(data, at)
        start, end = at + _HEAD.size, at + _HEAD.size + size
        if magic not in (_MAGIC, _ACKS_MAGIC) or size > _MAX_PAYLOAD or end > len(data):
            break
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            break
        if magic == _ACKS_MAGIC:
            if size % _INDEX.size:
                break
            acked.update(i for (i,) in _INDEX.iter_unpack(payload))
            at = end
            continue
        if size < _PAYLOAD.size:
            break
        tlen, klen = _PAYLOAD.unpack_from(payload)
        body = _PAYLOAD.size
        if body + tlen + klen > size:
            break
        try:
            topic = payload[body : body + tlen].decode()
        except UnicodeDecodeError:
            break
        key = payload[body + tlen : body + tlen + klen]
        entries.append(JournalEntry(topic, key, payload[body + tlen + klen :]))
        at = end
    return entries, acked, at


def parse(data: bytes) -> tuple[list[JournalEntry], int]:
    """The entries of the whole records at the start of ``data`` (acknowledged or not)
    and the length the records take. Never raises."""
    entries, _, at = parse_records(data)
    return entries, at


def read_journal(path: Path) -> list[JournalEntry]:
    """A journal file's entries not acknowledged, in order; a torn tail is cut back off
    the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        log.error("journal_unreadable", path=str(path), error=str(exc))
        return []
    entries, acked, good = parse_records(data)
    if good < len(data):
        log.warning("journal_torn_tail_cut", path=str(path), kept=good, dropped=len(data) - good)
        try:
            os.truncate(path, good)
        except OSError as exc:
            log.error("journal_not_cut", path=str(path), error=str(exc))
    return [entry for i, entry in enumerate(entries) if i not in acked]


def left_journals(directory: Path) -> list[Path]:
    """Journal segments a previous publisher left, oldest first (name order)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX))


def recover(directory: Path) -> tuple[list[JournalEntry], list[Path]]:
    """Every entry of the journals left in ``directory`` (in journal order) and their
    files, to delete once the entries are safe in the spool."""
    files = left_journals(directory)
    entries: list[JournalEntry] = []
    for path in files:
        entries.extend(read_journal(path))
    return entries, files
