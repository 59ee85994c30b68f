"""Line files a service appends to for its whole life (turn logs, manifests), and the
log sink's writer of them."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import structlog

from turnaudit.consumers.runtime.settings import LogSinkSettings
from turnaudit.files import open_private, private_dir

TURN_LOGGER = "turnaudit.turns"

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


class TurnLineWriter:
    """Where the turn lines end: stdout, or size-rotated files.

    Rotation is ``RotatingFileHandler``'s, but lines are written to its stream
    directly (a batch in one call per file) and flushed once per batch: the
    per-record overhead of stdlib logging would cost more than decoding the
    message. Also a structlog logger (``msg``), for lines rendered by a
    configured processor chain.
    """

    name = TURN_LOGGER  # for structlog's add_logger_name

    def __init__(self, settings: LogSinkSettings) -> None:
        self._rotating: logging.handlers.RotatingFileHandler | None = None
        self._text: IO[str] = sys.stdout
        self._size = 0  # bytes in the current file (rotation without a stat per line)
        if settings.file is not None:
            private_dir(settings.file.parent)
            cut_torn_tail(settings.file)
            self._rotating = _PrivateRotatingFileHandler(
                settings.file,
                maxBytes=settings.file_max_bytes,
                backupCount=settings.file_backups,
                encoding="utf-8",
            )
            self._text = self._rotating.stream  # type: ignore[assignment]  # open after init
            self._size = self._text.seek(0, 2)
        # Lines are UTF-8 bytes; a text stream without a binary buffer (a
        # StringIO in place of stdout) gets them decoded.
        self._binary: IO[bytes] | None = getattr(self._text, "buffer", None)

    def msg(self, line: str) -> None:
        self.write_lines([line.encode() + b"\n"])

    info = warning = error = critical = debug = msg

    def write_lines(self, lines: Sequence[bytes]) -> None:
        """Lines that each end in a newline, in order; a file rotates between lines."""
        self.write_block(b"".join(lines))

    def write_block(self, block: bytes | bytearray) -> None:
        """Whole lines (each ending in a newline) in one buffer, in order.

        A file rotates between lines: before the first line that would take it
        past its size, unless it is empty (a line longer than the limit fills
        a file of its own).
        """
        rotating = self._rotating
        if rotating is None:
            self._write(block)
            return
        limit = rotating.maxBytes
        start, end = 0, len(block)
        with memoryview(block) as view:
            while start < end:
                room = limit - self._size
                if end - start <= room:
                    cut = end
                else:
                    # After the last newline that fits: whole lines only.
                    cut = block.rfind(b"\n", start, start + max(room, 0)) + 1
                    if cut <= start:  # not one line fits
                        if self._size:
                            self._roll_over(rotating)
                            continue
                        cut = block.index(b"\n", start) + 1
                self._write(view[start:cut])
                self._size += cut - start
                start = cut
                if start < end:
                    self._roll_over(rotating)

    def _roll_over(self, rotating: logging.handlers.RotatingFileHandler) -> None:
        rotating.doRollover()
        self._text = rotating.stream  # type: ignore[assignment]  # reopened
        self._binary = self._text.buffer  # type: ignore[attr-defined]  # a file's
        self._size = 0

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._binary is None:
            self._text.write(bytes(data).decode())
        else:
            self._text.flush()  # anything written as text before stays before
            self._binary.write(data)

    def flush(self) -> None:
        self._text.flush()
        if self._binary is not None:
            self._binary.flush()

    def close(self) -> None:
        self.flush()
        if self._rotating is not None:
            self._rotating.close()


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Rotation as the stdlib does it, every file it opens owner-only (rotated files
    are renamed, so they keep the mode)."""

    def _open(self) -> Any:
        return open_private(self.baseFilename, self.mode, encoding=self.encoding)
