"""Verify's event ids in bounded memory: the newest ``IdMemory.event_ids`` stay in the
stream tracker's memory, older ones are spilled to sorted run files in a temporary
directory and recalled from them exactly (``SpilledIds``); ``CountedIds`` is every
counted id of the range, in memory or spilled, for the log reconciliation.

The tracker asks the spill only for an id it does not hold, and only once it has
spilled any: a range within the bound never touches the disk.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import NamedTuple

from turnaudit.errors import ConfigurationError
from turnaudit.identity import Seen
from turnaudit.serialization.native import NativeStreamTracker, SortedRunStore

DEFAULT_MEMORY_IDS = 1_000_000
# Streams verify keeps in memory (about 0.4 KB each); the least recently seen beyond
# this go to an SQLite scratch file and come back when their stream does.
DEFAULT_MEMORY_STREAMS = 200_000
# Streams written to that file per transaction.
STREAM_BATCH = 4096
# A job's streams, handed to the merging process (beside its id runs).
STREAMS_FILE = "streams.sqlite3"
# Spilled ids are written this many at a time (a run; the log reconciliation's SQLite
# file: one transaction).
SPILL_BATCH = 10_000
# Ids handed from the native store to Python at a time, when every spilled id is listed.
ITERATION_CHUNK = 10_000
# SQLite's page cache for the log reconciliation's file, in KiB (a negative cache_size
# is KiB): bounded.
SPILL_CACHE_KIB = 16_384
# A Bloom filter of the spilled ids, of a fixed size (32 MiB): most ids a range reads are
# new, and the filter answers "never spilled" for them without a lookup on disk. Its
# false positives (about 0.1 % at 10 million spilled ids, rising past 100 million) each
# cost one lookup, never a wrong answer.
FILTER_BITS = 1 << 28
# A range of more ids than that filter serves well gets one of at least this many bits an
# id (about 2 % false positives), sized from the range's message count: 1.25 B an id
# rather than the disk searched for most new ids past a few hundred million.
FILTER_BITS_PER_ID = 10


def filter_bits_for(expected_ids: int) -> int:
    """The spilled ids' filter for a range of ``expected_ids`` messages: a power of two of
    bits (the filter's blocks), ``FILTER_BITS`` at least, ``FILTER_BITS_PER_ID`` an id."""
    wanted = max(FILTER_BITS, FILTER_BITS_PER_ID * max(0, expected_ids))
    return 1 << (wanted - 1).bit_length()


@dataclass(frozen=True)
class IdMemory:
    """How many event ids verify keeps in memory, and where older ones are spilled
    (a temporary directory under ``spill_dir``; the system's temporary directory when
    None), removed when verify ends."""

    event_ids: int = DEFAULT_MEMORY_IDS
    spill_dir: Path | None = None
    spill_batch: int = SPILL_BATCH  # ids written to the file per transaction
    streams: int = DEFAULT_MEMORY_STREAMS  # streams in memory, the rest spilled
    expected_ids: int = 0  # the range's messages, when known: sizes the ids' filter

    @property
    def filter_bits(self) -> int:
        return filter_bits_for(self.expected_ids)

    @property
    def batch(self) -> int:
        """Ids written per transaction: never more than memory holds."""
        return min(self.spill_batch, self.event_ids)

    def __post_init__(self) -> None:
        if self.event_ids < 1 or self.spill_batch < 1:
            raise ConfigurationError(
                "verify keeps 1 or more event ids in memory and spills "
                f"1 or more at a time, not {self.event_ids} and "
                f"{self.spill_batch}"
            )
        if self.streams < 1:
            raise ConfigurationError(
                f"verify keeps 1 or more streams in memory, not {self.streams}"
            )


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
                self._directory = tempfile.TemporaryDirectory(
                    prefix="turnaudit-verify-", dir=self._spill_dir
                )
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


class SpilledIds:
    """The event ids a bounded tracker dropped, on disk.

    ``native`` (a ``SortedRunStore``, handed to the stream tracker as its forgotten-ids
    store: ids go from one to the other without Python objects) keeps a pending batch
    (fewer than ``batch`` ids) in memory, writes each full batch once, sorted, as a run
    file, and merges runs of one size into one (an id is rewritten a few times,
    sequentially, never inserted into a large index); a Bloom filter of every id held
    keeps most lookups of new ids off the disk. The first copy of an id kept is what it
    keeps. The temporary directory of the runs is made when the first run is written and
    removed by ``close`` (and, should ``close`` never run, when the process exits)."""

    def __init__(
        self,
        spill_dir: Path | None = None,
        batch: int = SPILL_BATCH,
        filter_bits: int = FILTER_BITS,
    ) -> None:
        self._spill_dir = spill_dir
        self._directory: tempfile.TemporaryDirectory[str] | None = None
        self.native = SortedRunStore(self._make_directory, batch, filter_bits)

    def _make_directory(self) -> str:
        if self._directory is None:
            self._directory = tempfile.TemporaryDirectory(
                prefix="turnaudit-verify-", dir=self._spill_dir
            )
        return self._directory.name

    def stream_file(self) -> str:
        """Where the tracker's spilled streams go (its SQLite scratch file), in the same
        directory, made now if not yet."""
        return str(Path(self._make_directory()) / "streams.sqlite3")

    @property
    def path(self) -> Path | None:
        """The directory of the spill's run files, once one was written."""
        return None if self._directory is None else Path(self._directory.name)

    def keep(self, event_id: str, seen: Seen) -> None:
        self.native.keep(event_id, seen)

    def keep_many(self, dropped: Iterable[tuple[str, Seen]]) -> None:
        self.native.keep_many(dropped)

    def recall(self, event_id: str) -> Seen | None:
        return self.native.recall(event_id)

    def flush(self) -> None:
        """The pending batch written as a run."""
        self.native.flush()

    def export(self, remembered: Mapping[str, Seen], destination: Path) -> None:
        """Every id, these in memory and the spilled ones, into one run file at
        ``destination`` for another process to ``absorb``; this store is closed."""
        self.native.keep_many(remembered.items())
        self.native.export(destination)
        self.close()

    def export_runs(self, tracker: NativeStreamTracker, directory: Path) -> list[Path]:
        """Every id, the spilled ones and those ``tracker`` still remembers (taken from it),
        as run files in ``directory`` for another process to ``absorb_all``, nothing merged
        on the way; this store is closed."""
        files = self.native.export_runs(tracker, directory)
        self.close()
        return files

    def absorb(self, path: Path) -> list[Repeat]:
        """The ids of another store's exported file; those both hold are returned, and
        the copy read first (lowest partition, offset) is kept."""
        return [
            Repeat.of(event_id, mine, theirs) for event_id, mine, theirs in self.native.absorb(path)
        ]

    def absorb_all(self, paths: Sequence[Path]) -> list[Repeat]:
        """``absorb`` of each file in turn (the same answer); files that share no id, into an
        empty store, are taken over as they are instead of rewritten."""
        return [
            Repeat.of(event_id, mine, theirs)
            for event_id, mine, theirs in self.native.absorb_all(paths)
        ]

    def __iter__(self) -> Iterator[str]:
        for chunk in self.native.id_chunks(ITERATION_CHUNK):
            yield from chunk

    def __len__(self) -> int:
        return len(self.native)

    def close(self) -> None:
        """Removes the spill's files and their directory (idempotent)."""
        self.native.close()
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None


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
    def _from_iterable(cls, it: Iterable[str]) -> set[str]:  # type: ignore[override]  # plain sets
        # Set operations (``a - b``) build plain sets, not another view.
        return set(it)
