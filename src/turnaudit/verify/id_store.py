"""Verify's event ids in bounded memory: the newest ``IdMemory.event_ids`` stay in the
stream tracker's memory, older ones are spilled to an SQLite file in a temporary
directory and recalled from it exactly (``SpilledIds``); ``CountedIds`` is every
counted id of the range, in memory or spilled, for the log reconciliation.

The tracker asks the spill only for an id it does not hold, and only once it has
spilled any: a range within the bound never touches the disk.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import NamedTuple

from turnaudit.errors import ConfigurationError
from turnaudit.identity import Seen
from turnaudit.serialization.native import BloomFilter

DEFAULT_MEMORY_IDS = 1_000_000
# Spilled ids are written this many at a time, in one transaction.
SPILL_BATCH = 10_000
# SQLite's page cache for the spill file, in KiB (a negative cache_size is KiB): bounded.
SPILL_CACHE_KIB = 16_384
# A Bloom filter of the spilled ids, of a fixed size (32 MiB): most ids a range reads are
# new, and the filter answers "never spilled" for them without a lookup in the file. Its
# false positives (about 0.1 % at 10 million spilled ids, rising past 100 million) each
# cost one lookup, never a wrong answer.
FILTER_BITS = 1 << 28


@dataclass(frozen=True)
class IdMemory:
    """How many event ids verify keeps in memory, and where older ones are spilled
    (a temporary directory under ``spill_dir``; the system's temporary directory when
    None), removed when verify ends."""

    event_ids: int = DEFAULT_MEMORY_IDS
    spill_dir: Path | None = None
    spill_batch: int = SPILL_BATCH  # ids written to the file per transaction

    @property
    def batch(self) -> int:
        """Ids written per transaction: never more than memory holds."""
        return min(self.spill_batch, self.event_ids)

    def __post_init__(self) -> None:
        if self.event_ids < 1 or self.spill_batch < 1:
            raise ConfigurationError("verify keeps 1 or more event ids in memory and spills "
                                     f"1 or more at a time, not {self.event_ids} and "
                                     f"{self.spill_batch}")


class ScratchDb:
    """An SQLite scratch file (``ids.sqlite3``) with one table, in a new temporary
    directory under ``spill_dir`` made at the first ``connect``; ``close`` removes both
    (and, should ``close`` never run, they go when the process exits)."""

    def __init__(self, spill_dir: Path | None, table: str) -> None:
        self._spill_dir = spill_dir
        self._table = table
        self._directory: tempfile.TemporaryDirectory[str] | None = None
        self.db: sqlite3.Connection | None = None  # while connected

    @property
    def path(self) -> Path | None:
        """The file, once made."""
        return None if self._directory is None else Path(self._directory.name) / "ids.sqlite3"

    def connect(self) -> sqlite3.Connection:
        if self.db is None:
            if self._directory is None:
                self._directory = tempfile.TemporaryDirectory(prefix="turnaudit-verify-",
                                                              dir=self._spill_dir)
            self.db = sqlite3.connect(str(self.path))
            # A scratch file removed at the end: no journal, no fsync, a bounded cache.
            self.db.execute("PRAGMA journal_mode = OFF")
            self.db.execute("PRAGMA synchronous = OFF")
            self.db.execute(f"PRAGMA cache_size = -{SPILL_CACHE_KIB}")
            self.db.execute(f"CREATE TABLE IF NOT EXISTS {self._table}")
        return self.db

    def disconnect(self) -> None:
        """The connection closed, the file kept (to be moved, or connected again)."""
        if self.db is not None:
            self.db.close()
            self.db = None

    def close(self) -> None:
        """The connection closed, the file and its directory removed (idempotent)."""
        self.disconnect()
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None


class Repeat(NamedTuple):
    """An event id two stores both counted (two ``verify --jobs`` read it in two
    partitions): the copy read first in (partition, offset) order, and the other."""

    event_id: str
    first: Seen
    repeat: Seen

    @classmethod
    def of(cls, event_id: str, one: Seen, other: Seen) -> Repeat:
        def place(seen: Seen) -> tuple[int, int]:
            return (seen[1] or 0, seen[2] or 0)
        return cls(event_id, *sorted((one, other), key=place))


_RECALL = "SELECT hash, partition, offset FROM seen WHERE event_id = ?"


class SpillFilter:
    """A Bloom filter over strings in a fixed bit array (native: ``BloomFilter``): three
    positions per string by double hashing. ``might_hold`` is False only for a string
    never added; True may be wrong (then the caller looks it up)."""

    def __init__(self, bits: int = FILTER_BITS) -> None:
        if bits < 64 or bits & (bits - 1):
            raise ValueError(f"a spill filter has a power of two of 64 or more bits, not {bits}")
        native = BloomFilter(bits)
        self.add = native.add
        self.add_many = native.add_many
        self.might_hold = native.might_hold


class SpilledIds:
    """The event ids a bounded tracker dropped, in an SQLite file (a ``ForgottenIds``).

    A pending batch (fewer than ``batch`` ids) is kept in memory and looked up first;
    the file and its directory are created at the first full batch and removed by
    ``close`` (and, should ``close`` never run, when the process exits)."""

    def __init__(self, spill_dir: Path | None = None, batch: int = SPILL_BATCH) -> None:
        self._batch = batch
        self._pending: dict[str, Seen] = {}
        self._file = ScratchDb(spill_dir, "seen (event_id TEXT PRIMARY KEY, hash TEXT NOT "
                               "NULL, partition INTEGER, offset INTEGER) WITHOUT ROWID")
        self._lookup: sqlite3.Cursor | None = None
        self._stored = 0
        self._closed = False
        # Every id written to the file is in the filter (built at the first flush);
        # None once the file took ids some other way (``absorb``): then every recall
        # looks in the file.
        self._filter: SpillFilter | None = None
        self._filtered = True

    @property
    def path(self) -> Path | None:
        """The spill file, once one was written."""
        return self._file.path

    def keep(self, event_id: str, seen: Seen) -> None:
        self._pending[event_id] = seen
        if len(self._pending) >= self._batch:
            self.flush()

    def keep_many(self, dropped: list[tuple[str, Seen]]) -> None:
        self._pending.update(dropped)
        if len(self._pending) >= self._batch:
            self.flush()

    def recall(self, event_id: str) -> Seen | None:
        seen = self._pending.get(event_id)
        if seen is not None or self._lookup is None:
            self._check_open()
            return seen
        spilled = self._filter
        if self._filtered and spilled is not None and not spilled.might_hold(event_id):
            return None  # never written to the file
        # One cursor for every lookup: a third cheaper than a new one each time.
        row = self._lookup.execute(_RECALL, (event_id,)).fetchone()
        return None if row is None else (str(row[0]), row[1], row[2])

    def flush(self) -> None:
        """The pending batch into the file, in one transaction."""
        self._check_open()
        if not self._pending:
            return
        db = self._open()
        if self._filter is None:
            self._filter = SpillFilter()
        self._filter.add_many(self._pending)
        with db:
            # The first read of an id is what dedupe keeps (an id is spilled once). In key
            # order: neighbouring inserts touch the same pages of the table's B-tree.
            db.executemany("INSERT OR IGNORE INTO seen VALUES (?, ?, ?, ?)",
                           [(event_id, *seen) for event_id, seen in sorted(self._pending.items())])
        self._stored += len(self._pending)
        self._pending.clear()

    def export(self, remembered: Mapping[str, Seen], destination: Path) -> None:
        """Every id, these in memory and the spilled ones, into one file at
        ``destination`` for another process to ``absorb``; this store is closed."""
        for event_id, seen in remembered.items():
            self.keep(event_id, seen)
        self.flush()
        self._open()  # a file also when nothing was spilled
        self._file.disconnect()
        self._lookup = None
        shutil.move(str(self.path), destination)
        self.close()

    def absorb(self, path: Path) -> list[Repeat]:
        """The ids of another store's exported file; those both hold are returned, and
        the copy read first (lowest partition, offset) is kept."""
        self.flush()
        db = self._open()
        self._filtered = False  # the absorbed ids are not in the filter
        db.execute("ATTACH DATABASE ? AS part", (str(path),))
        try:
            with db:
                repeats, earlier = [], []
                for r in db.execute("SELECT p.event_id, s.hash, s.partition, s.offset, p.hash, "
                                    "p.partition, p.offset FROM part.seen AS p JOIN seen AS s "
                                    "ON s.event_id = p.event_id"):
                    kept: Seen = (str(r[1]), r[2], r[3])
                    theirs: Seen = (str(r[4]), r[5], r[6])
                    repeats.append(Repeat.of(str(r[0]), kept, theirs))
                    if repeats[-1].first is theirs:
                        earlier.append((*theirs, str(r[0])))
                db.execute("INSERT OR IGNORE INTO seen SELECT * FROM part.seen")
                db.executemany(
                    "UPDATE seen SET hash = ?, partition = ?, offset = ? WHERE event_id = ?",
                    earlier)
        finally:
            db.execute("DETACH DATABASE part")
        self._stored = int(db.execute("SELECT COUNT(*) FROM seen").fetchone()[0])
        return repeats

    def _open(self) -> sqlite3.Connection:
        if self._file.db is None:
            self._lookup = self._file.connect().cursor()
        return self._file.connect()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the spilled event ids were removed (verify ended)")

    def __iter__(self) -> Iterator[str]:
        self._check_open()
        yield from list(self._pending)
        if self._file.db is not None:
            for (event_id,) in self._file.db.execute("SELECT event_id FROM seen"):
                yield str(event_id)

    def __len__(self) -> int:
        return self._stored + len(self._pending)

    def close(self) -> None:
        """Removes the spill file and its directory (idempotent)."""
        self._closed = True
        self._pending.clear()
        self._filter = None
        self._lookup = None
        self._file.close()


class CountedIds(AbstractSet[str]):
    """Every event id counted as a turn: the tracker's in memory and the spilled ones
    (disjoint: an id is spilled when memory drops it)."""

    def __init__(self, remembered: Mapping[str, Seen], spilled: SpilledIds) -> None:
        self._remembered = remembered
        self._spilled = spilled

    def __contains__(self, event_id: object) -> bool:
        if not isinstance(event_id, str):
            return False
        return event_id in self._remembered or self._spilled.recall(event_id) is not None

    def __iter__(self) -> Iterator[str]:
        return chain(self._remembered, self._spilled)

    def __len__(self) -> int:
        return len(self._remembered) + len(self._spilled)

    @classmethod
    def _from_iterable(cls, it: Iterable[str]) -> set[str]:  # type: ignore[override]
        # Set operations (``a - b``) build plain sets, not another view.
        return set(it)
