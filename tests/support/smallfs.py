"""A really small filesystem for fault injection: a tmpfs mounted by the test.

The suite runs as root; the mount is removed at the end even when the test fails.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} not found: the fault-injection tests need it"
    return path


@contextmanager
def small_filesystem(mount_point: Path, size_kb: int) -> Iterator[Path]:
    """``mount_point`` as a tmpfs of ``size_kb`` KB: writes past it fail with ENOSPC."""
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [_tool("mount"), "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mount_point)],
        check=True,
        capture_output=True,
    )
    try:
        yield mount_point
    finally:
        subprocess.run([_tool("umount"), "-l", str(mount_point)], check=True, capture_output=True)


def fill_disk(directory: Path) -> Path:
    """Write a file until the filesystem is really full; return the file."""
    filler = directory / "filler"
    error = 0
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            error = exc.errno or 0
    assert error == errno.ENOSPC, f"the filesystem said {error}, not ENOSPC"
    return filler
