"""The output files of a replay: replaced atomically, made durable, cut back on resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from turnaudit.errors import ConfigurationError


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def fsync_path(path: Path) -> int:
    """fsync a file written through another handle; returns its size."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def open_for_resume(path: Path, position: int) -> IO[bytes]:
    """The output file cut back to ``position`` (what the last checkpoint recorded)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if position == 0:
        path.write_bytes(b"")
    elif not path.exists() or path.stat().st_size < position:
        raise ConfigurationError(
            f"{path} is shorter than its checkpoint records ({position} bytes); "
            "remove both to start over"
        )
    out = path.open("r+b")
    out.truncate(position)
    out.seek(position)
    return out
