"""``make TARGET`` in the checkout, one at a time across the suite's processes.

The broker tier runs on two pytest workers, and the wheel, the wheelhouse and the image share
``dist/`` (``make dist`` starts with ``rm -rf dist``): two workers making them at once would
remove each other's files. An exclusive lock on ``build/make.lock`` makes the second wait,
then find the target up to date.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess

from tests.support import PROJECT_ROOT

LOCK = PROJECT_ROOT / "build/make.lock"


def make(target: str, timeout: float = 1800) -> None:
    """``make TARGET``; fails the test with its output when it fails."""
    tool = shutil.which("make")
    assert tool is not None, "make not found"
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        ran = subprocess.run(
            [tool, "--no-print-directory", target],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    assert ran.returncode == 0, f"make {target}:\n{ran.stdout[-3000:]}{ran.stderr[-3000:]}"
