"""Where the archive lives, its files written once: the interface every store keeps
(``ArchiveStore``) and the local directory (``LocalArchive``); the S3 store is
``turnaudit.archive.s3_store``, and ``turnaudit.archive.location`` opens either from a
LOCATION.

A file is written to a temporary name under ``.partial/`` (same file system), made
durable (fsync), then linked to its final name: ``link`` fails when the name exists, so
a second writer of the same name never replaces the first one's bytes (a rename would).
A name that exists already with the same bytes is success (a segment written again after
a restart); with other bytes it is ``ArchiveConflict``. The folder is fsynced after the
link, so a file the archiver went on from survives a power cut.

Files are their owner's only (``turnaudit.files``): segments hold what turns said.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Protocol

from turnaudit.errors import TurnAuditError
from turnaudit.files import open_private, private_dir

PARTIAL_FOLDER = ".partial"


class ArchiveConflict(TurnAuditError):
    """A name the archive holds already, with other bytes than the ones to write."""


class ArchiveStore(Protocol):
    """An archive's files by ``/``-separated name, each written once (docs/archive.md)."""

    def write_once(self, name: str, data: bytes) -> bool:
        """``data`` under ``name``: True when written now, False when the same bytes were
        there already; ``ArchiveConflict`` when other bytes are."""
        ...

    def read(self, name: str) -> bytes | None:
        """The file's bytes, None when there is none."""
        ...

    def files(self, folder: str = "") -> list[str]:
        """Every file under ``folder`` (recursively), sorted."""
        ...

    def folders(self, folder: str = "") -> list[str]:
        """The folders right inside ``folder``, sorted (names only)."""
        ...

    def clear_partials(self, older_than_s: float, now: float) -> int:
        """What killed writers left half written, older than ``older_than_s``: the count
        removed."""
        ...


class LocalArchive:
    """An archive in a local directory (paths are ``/``-separated, relative to it)."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = root
        # False: no fsync (an archive a test builds and throws away).
        self.durable = durable

    def __str__(self) -> str:
        return str(self.root)

    def write_once(self, name: str, data: bytes) -> bool:
        """``data`` under ``name``: True when written now, False when the same bytes were
        there already; ``ArchiveConflict`` when other bytes are."""
        final = self.root / name
        existing = self.read(name)
        if existing is not None:
            return _same(name, existing, data)
        private_dir(final.parent)
        partial = private_dir(self.root / PARTIAL_FOLDER) / f"{uuid.uuid4().hex}.partial"
        try:
            with open_private(partial, "xb") as out:
                out.write(data)
                out.flush()
                if self.durable:
                    os.fsync(out.fileno())
            try:
                os.link(partial, final)
            except FileExistsError:  # written meanwhile by another writer
                return _same(name, (self.read(name) or b""), data)
            if self.durable:
                _sync_folder(final.parent)
        finally:
            partial.unlink(missing_ok=True)
        return True

    def read(self, name: str) -> bytes | None:
        """The file's bytes, None when there is none."""
        try:
            return (self.root / name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def files(self, folder: str = "") -> list[str]:
        """Every file under ``folder`` (recursively), sorted, temporary files left out."""
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return []
        found = []
        for path in base.rglob("*"):
            relative = path.relative_to(self.root).as_posix()
            if relative.split("/", 1)[0] == PARTIAL_FOLDER or not path.is_file():
                continue
            found.append(relative)
        return sorted(found)

    def folders(self, folder: str = "") -> list[str]:
        """The folders right inside ``folder``, sorted (names only)."""
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name != PARTIAL_FOLDER)

    def clear_partials(self, older_than_s: float, now: float) -> int:
        """Temporary files a killed writer left, unchanged for ``older_than_s`` (a
        writer's own lives for one write: seconds). The count removed."""
        folder = self.root / PARTIAL_FOLDER
        removed = 0
        if folder.is_dir():
            for path in folder.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    if now - path.stat().st_mtime >= older_than_s:
                        path.unlink()
                        removed += 1
        return removed


def _same(name: str, existing: bytes, data: bytes) -> bool:
    if existing != data:
        raise ArchiveConflict(f"{name} exists already with other content: not replaced")
    return False


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
