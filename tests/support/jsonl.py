"""Reading JSON-lines files that another process may still be writing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def complete_json_lines(path: Path) -> list[dict[str, Any]]:
    """The newline-terminated lines of ``path``, parsed; [] while it does not exist.

    A writer flushes a line in one or more ``write`` calls and a process killed
    between them leaves a torn line behind, so the text after the last newline
    is still being written (or cut on restart) and is not read, as a log shipper
    tailing the file would not read it.
    """
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1] if line.strip()]
