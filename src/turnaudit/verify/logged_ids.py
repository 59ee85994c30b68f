"""A log sink's turn lines by event id in bounded memory (``verify --log-file``): the
first ``memory`` distinct ids counted in memory, the others in an SQLite file in a
temporary directory, removed by ``close``."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from pathlib import Path

from turnaudit.verify.id_store import SPILL_BATCH, ScratchDb


class LoggedIds(Collection[str]):
    """Distinct logged event ids (``len``, ``in``, iteration) and the lines read."""

    def __init__(
        self, memory: int, spill_dir: Path | None = None, batch: int = SPILL_BATCH
    ) -> None:
        self._memory = memory
        self._batch = batch
        self._counted: set[str] = set()
        self._pending: set[str] = set()
        self._file = ScratchDb(spill_dir, "logged (event_id TEXT PRIMARY KEY) WITHOUT ROWID")
        self._on_disk = 0
        self.lines = 0

    @property
    def path(self) -> Path | None:
        return self._file.path

    def add(self, event_id: str) -> None:
        self.lines += 1
        if event_id in self._counted:
            return
        if len(self._counted) < self._memory:
            self._counted.add(event_id)
            return
        self._pending.add(event_id)
        if len(self._pending) >= self._batch:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        db = self._file.connect()
        with db:
            db.executemany(
                "INSERT OR IGNORE INTO logged VALUES (?)",
                [(event_id,) for event_id in sorted(self._pending)],
            )
        self._pending.clear()
        self._on_disk = int(db.execute("SELECT COUNT(*) FROM logged").fetchone()[0])

    def __contains__(self, event_id: object) -> bool:
        if event_id in self._counted or event_id in self._pending:
            return True
        db = self._file.db
        return (
            db is not None
            and db.execute("SELECT 1 FROM logged WHERE event_id = ?", (event_id,)).fetchone()
            is not None
        )

    def __iter__(self) -> Iterator[str]:
        self.flush()
        yield from self._counted
        if self._file.db is not None:
            for (event_id,) in self._file.db.execute("SELECT event_id FROM logged"):
                yield str(event_id)

    def __len__(self) -> int:
        self.flush()
        return len(self._counted) + self._on_disk

    def close(self) -> None:
        self._file.close()
