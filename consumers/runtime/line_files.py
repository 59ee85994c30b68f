"""Line files a service appends to for its whole life (turn logs, manifests)."""

from __future__ import annotations

from pathlib import Path

import structlog

log = structlog.get_logger("turnaudit.consumer")


def cut_torn_tail(path: Path) -> None:
    """Cut a partial last line (a process killed mid-write, a full disk) back to
    the last newline.

    The batch that line belonged to never had its offsets stored, so the
    restarted service writes it again, whole: the file keeps only complete
    lines, and the next append starts on a line of its own.
    """
    try:
        with path.open("r+b") as f:
            end = f.seek(0, 2)
            if end == 0:
                return
            f.seek(end - 1)
            if f.read(1) == b"\n":
                return
            # Read back in blocks until the last newline (or the start of the file).
            keep, pos = 0, end
            while pos > 0:
                step = min(65536, pos)
                f.seek(pos - step)
                cut = f.read(step).rfind(b"\n")
                if cut >= 0:
                    keep = pos - step + cut + 1
                    break
                pos -= step
            f.truncate(keep)
        log.warning("torn_tail_cut", path=str(path), bytes_cut=end - keep)
    except FileNotFoundError:
        return
