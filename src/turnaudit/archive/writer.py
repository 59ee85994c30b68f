"""One partition's archiver: records in, sealed segments and signed digests out.

Records are kept in memory in the partition's open segment until it is cut: when a
record's timestamp falls in a later window (``window_ms``, an hour by default), when the
segment would pass ``max_bytes``, when a quiet partition's window is over by
``seal_grace_s`` (wall clock), or at a clean stop. A cut segment is written by
``write`` (store's write once), which keeps it until written: a failed write is tried
again with the same records, the same bytes. ``held`` is the first offset not yet in a
written segment, which the service keeps its stored offsets at: what a crash loses is
read again.

A partition taken over (at start, after a restart or a rebalance) is loaded from the
archive first (``load``): the last segment's offset (records up to it are not written
again: a redelivered record is counted ``reread``), the last digest (the next one chains
to it), and the segments written since it (the next digest lists them). So a SIGKILL at
any point leaves no gap and no second copy of a segment.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from turnaudit.archive.digests import (
    DIGEST_FOLDER,
    ArchiveDigest,
    SegmentEntry,
    decode_digest,
    digest_index,
    next_digest,
)
from turnaudit.archive.segments import (
    CODECS,
    SEGMENT_FOLDER,
    ArchivedRecord,
    SegmentName,
    decode_segment,
    encode_segment,
    partition_folder,
    sha256_hex,
)
from turnaudit.archive.store import ArchiveConflict, ArchiveStore
from turnaudit.checkpoints import SigningKey
from turnaudit.errors import ConfigurationError

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class ArchivePolicy:
    """When segments are cut and digests written."""

    window_ms: int = HOUR_MS  # a segment holds one window of record time
    max_bytes: int = 32 * 1024 * 1024  # ... and at most this many bytes of records
    seal_grace_s: float = 60.0  # a quiet partition's window is cut this long after it ended
    digest_interval_s: float = 3600.0
    codec: str = "deflate"

    def __post_init__(self) -> None:
        if self.window_ms < 1 or self.max_bytes < 1:
            raise ConfigurationError("the archive's window and size bound must be above 0")
        if not (self.seal_grace_s >= 0 and self.digest_interval_s >= 0):
            raise ConfigurationError("the archive's grace and digest interval must be 0 or more")
        if self.codec not in CODECS:
            raise ConfigurationError(f"archive codec {self.codec!r}: choose {' or '.join(CODECS)}")


@dataclass
class _Cut:
    records: list[ArchivedRecord]


@dataclass
class PartitionArchive:
    """The archiver's state for one partition (see the module docstring)."""

    topic: str
    partition: int
    archived_through: int | None = None  # last offset in a written segment
    last_digest: ArchiveDigest | None = None
    last_digest_s: float = 0.0  # wall time of the last digest (0: none yet)
    undigested: list[SegmentEntry] = field(default_factory=list)
    open: list[ArchivedRecord] = field(default_factory=list)
    open_window: int = 0
    open_bytes: int = 0
    cut: deque[_Cut] = field(default_factory=deque)
    reread: int = 0  # records skipped: archived already

    # -- taking records --------------------------------------------------------------
    def take(self, record: ArchivedRecord, policy: ArchivePolicy) -> bool:
        """The record into the open segment; False when it is archived already."""
        taken = self.taken_through()
        if taken is not None and record.offset <= taken:
            self.reread += 1  # in a written segment, or in one still to be written
            return False
        window = record.timestamp // policy.window_ms
        size = record.size()
        if self.open and (window > self.open_window or self.open_bytes + size > policy.max_bytes):
            self.cut_open()
        if not self.open:
            self.open_window = window
        self.open.append(record)
        self.open_bytes += size
        return True

    def taken_through(self) -> int | None:
        """The last offset taken: open, cut, or written (None: nothing yet)."""
        if self.open:
            return self.open[-1].offset
        if self.cut:
            return self.cut[-1].records[-1].offset
        return self.archived_through

    def cut_open(self) -> None:
        if self.open:
            self.cut.append(_Cut(self.open))
            self.open, self.open_bytes = [], 0

    def cut_quiet(self, now_s: float, policy: ArchivePolicy) -> bool:
        """The open segment cut when its window ended ``seal_grace_s`` ago."""
        window_end_s = (self.open_window + 1) * policy.window_ms / 1000
        if self.open and now_s >= window_end_s + policy.seal_grace_s:
            self.cut_open()
            return True
        return False

    def oldest_unwritten(self) -> ArchivedRecord | None:
        """The first record taken and not yet in a written segment (None: all written)."""
        if self.cut:
            return self.cut[0].records[0]
        return self.open[0] if self.open else None

    def held(self) -> int | None:
        """The first offset not yet in a written segment (None: all written)."""
        oldest = self.oldest_unwritten()
        return None if oldest is None else oldest.offset

    # -- writing -----------------------------------------------------------------------
    def write(self, archive: ArchiveStore, policy: ArchivePolicy) -> list[SegmentEntry]:
        """Every cut segment written, in order; what was written (or found written)."""
        written = []
        while self.cut:
            records = self.cut[0].records
            name = SegmentName(self.topic, self.partition, records[0].offset, records[-1].offset)
            _check_no_overlap(archive, name)
            data = encode_segment(records, policy.codec)
            archive.write_once(name.path(), data)
            entry = SegmentEntry(
                name.first,
                name.last,
                len(records),
                len(data),
                sha256_hex(data),
                self.archived_through,
            )
            self.undigested.append(entry)
            self.archived_through = name.last
            self.cut.popleft()
            written.append(entry)
        return written

    def digest_due(self, now_s: float, policy: ArchivePolicy) -> bool:
        return bool(self.undigested) and now_s - self.last_digest_s >= policy.digest_interval_s

    def write_digest(self, archive: ArchiveStore, key: SigningKey, now_s: float) -> ArchiveDigest:
        """A digest of the segments written since the last one, signed and written."""
        digest = next_digest(
            self.topic,
            self.partition,
            self.last_digest,
            tuple(self.undigested),
            at_ms=int(now_s * 1000),
            key=key,
        )
        archive.write_once(digest.path(), digest.encode())
        self.last_digest, self.last_digest_s, self.undigested = digest, now_s, []
        return digest


def load_partition(archive: ArchiveStore, topic: str, partition: int) -> PartitionArchive:
    """A partition's state as the archive has it (see the module docstring); raises
    ``ArchiveConflict`` when its last digest or a segment after it cannot be read: the
    next digest could not chain to it, nor list it."""
    folder = partition_folder(topic, partition)
    state = PartitionArchive(topic, partition)
    indexed = []
    for path in archive.files(f"{folder}/{DIGEST_FOLDER}"):
        index = digest_index(path.rsplit("/", 1)[1])
        if index is not None:
            indexed.append((index, path))
    digested_through = -1
    if indexed:
        _, path = max(indexed)
        digest = decode_digest(archive.read(path) or b"")
        if digest is None:
            raise ArchiveConflict(f"{path}: the last digest does not decode; the next cannot chain")
        state.last_digest, state.last_digest_s = digest, digest.at_ms / 1000
        if digest.segments:
            digested_through = digest.segments[-1].last
    names = _segment_names(archive, topic, partition)
    before: int | None = None
    for name in names:
        if name.first > digested_through:
            state.undigested.append(_entry_of(archive, name, before))
        before = name.last
    state.archived_through = before
    return state


def _segment_names(archive: ArchiveStore, topic: str, partition: int) -> list[SegmentName]:
    folder = f"{partition_folder(topic, partition)}/{SEGMENT_FOLDER}"
    names = []
    for path in archive.files(folder):
        name = SegmentName.parse(topic, partition, path.rsplit("/", 1)[1])
        if name is not None:
            names.append(name)
    return sorted(names)


def _check_no_overlap(archive: ArchiveStore, name: SegmentName) -> None:
    """Another writer of the partition (one that took it over while this one still
    thought it held it) wrote some of these offsets already: not written twice."""
    for other in _segment_names(archive, name.topic, name.partition):
        if other != name and other.first <= name.last and name.first <= other.last:
            raise ArchiveConflict(f"{name.path()} would overlap {other.path()}: not written")


def _entry_of(archive: ArchiveStore, name: SegmentName, after: int | None) -> SegmentEntry:
    data = archive.read(name.path())
    if data is None:
        raise ArchiveConflict(f"{name.path()}: listed, then gone")
    try:
        records = sum(1 for _ in decode_segment(data))
    except ValueError as exc:
        raise ArchiveConflict(f"{name.path()}: not a readable segment ({exc})") from None
    return SegmentEntry(name.first, name.last, records, len(data), sha256_hex(data), after)
