"""A log sink's turn lines by event id in bounded memory (``verify --log-file``): the
first ``memory`` distinct ids counted in memory, the others in an SQLite file in a
temporary directory, removed by ``close``."""

from __future__ import annotations

import sqlite3
import tempfile
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path

from turnaudit.verify.id_store import SPILL_BATCH, scratch_db


class LoggedIds(Collection[str]):
    """Distinct logged event ids (``len``, ``in``, iteration) and the lines read."""

    def __init__(self, memory: int, spill_dir: Path | None = None,
                 batch: int = SPILL_BATCH) -> None:
        self._memory = memory
        self._spill_dir = spill_dir
        self._batch = batch
        self._counted: set[str] = set()
        self._pending: Counter[str] = Counter()
        self._directory: tempfile.TemporaryDirectory[str] | None = None
        self._db: sqlite3.Connection | None = None
        self._on_disk = 0
        self.lines = 0

    @property
    def path(self) -> Path | None:
        return None if self._directory is None else Path(self._directory.name) / "ids.sqlite3"

    def add(self, event_id: str) -> None:
        self.lines += 1
        if event_id in self._counted:
            return
        if len(self._counted) < self._memory:
            self._counted.add(event_id)
            return
        self._pending[event_id] += 1
        if len(self._pending) >= self._batch:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        if self._db is None:
            self._directory, self._db = scratch_db(
                self._spill_dir, "CREATE TABLE logged (event_id TEXT PRIMARY KEY) WITHOUT ROWID")
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO logged VALUES (?)",
                                 ((event_id,) for event_id in self._pending))
        self._pending.clear()
        self._on_disk = int(self._db.execute("SELECT COUNT(*) FROM logged").fetchone()[0])

    def __contains__(self, event_id: object) -> bool:
        if event_id in self._counted or event_id in self._pending:
            return True
        return self._db is not None and self._db.execute(
            "SELECT 1 FROM logged WHERE event_id = ?", (event_id,)).fetchone() is not None

    def __iter__(self) -> Iterator[str]:
        self.flush()
        yield from self._counted
        if self._db is not None:
            for (event_id,) in self._db.execute("SELECT event_id FROM logged"):
                yield str(event_id)

    def __len__(self) -> int:
        self.flush()
        return len(self._counted) + self._on_disk

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None
