"""The demo's log lines go to a file, so stdout holds the summary alone.

While the demo runs, the CLI's structlog lines, the services' (``service_logging``
renders through stdlib logging to ``sys.stderr``) and anything else written to
``sys.stderr`` go to one owner-only file, rewritten each run; on exit the previous
configuration and ``sys.stderr`` come back, so an error after the demo is still one
line on the terminal.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import structlog

from turnaudit.files import open_private
from turnaudit.logconfig import configure_cli_logging


def file_level(cli_level: str) -> str:
    """The file's level: INFO (what the services did), or lower when the command line
    asked for it."""
    levels = logging.getLevelNamesMapping()
    chosen = levels.get(cli_level.upper(), logging.INFO)
    return cli_level.upper() if chosen < logging.INFO else "INFO"


@contextlib.contextmanager
def logging_to_file(path: Path, level: str = "INFO") -> Iterator[Path]:
    previous = structlog.get_config()
    with open_private(path, "w", encoding="utf-8", parents=True) as out:
        try:
            # configure_cli_logging binds sys.stderr as it finds it: the file, here.
            with contextlib.redirect_stderr(out):
                configure_cli_logging(level)
                yield path
        finally:
            structlog.configure(**previous)
