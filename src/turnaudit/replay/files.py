"""The output files of a replay: replaced atomically, made durable, cut back on resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from turnaudit.errors import ConfigurationError
from turnaudit.files import open_private, private_dir, write_private


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a reader sees the old file or the whole new one
    (owner-only, ``turnaudit.files``)."""
    write_private(path, data)


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
    private_dir(path.parent)
    if position == 0:
        open_private(path, "wb").close()
    elif not path.exists() or path.stat().st_size < position:
        raise ConfigurationError(
            f"{path} is shorter than its checkpoint records ({position} bytes); "
            "remove both to start over"
        )
    out = open_private(path, "r+b")  # an existing file brought back to owner-only
    out.truncate(position)
    out.seek(position)
    return out
