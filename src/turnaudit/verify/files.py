"""The files verify reads: a log sink's JSON lines and an earlier report's stream heads."""

from __future__ import annotations

import json
import os
from collections.abc import Set as AbstractSet
from pathlib import Path

from turnaudit.errors import ConfigurationError
from turnaudit.identity import StreamId
from turnaudit.telemetry import rotated_log_files
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.logged_ids import LoggedIds
from turnaudit.verify.reconciliation import LogReconciliation, compare_log, turn_ids


def reconcile_log(
    path: Path, turns: AbstractSet[str], memory: IdMemory | None = None
) -> LogReconciliation:
    """Compare a log sink's JSON lines (``event: turn``), in ``path`` and its rotated
    copies (``rotated_log_files``), with the range's turns; the logged ids beyond
    ``memory`` are kept in a temporary file, removed before this returns."""
    memory = memory or IdMemory()
    logged = LoggedIds(memory.event_ids, memory.spill_dir, memory.batch)
    try:
        return _compare(path, turns, logged)
    finally:
        logged.close()


def _compare(path: Path, turns: AbstractSet[str], logged: LoggedIds) -> LogReconciliation:
    try:
        files = rotated_log_files(path, os.listdir(path.parent))
    except OSError as exc:
        raise ConfigurationError(f"cannot read the log-sink file {path}: {exc}") from exc
    for file in files:
        try:
            with file.open("rb") as handle:
                for event_id in turn_ids(handle):
                    logged.add(event_id)
        except FileNotFoundError:
            if len(files) == 1:
                raise ConfigurationError(
                    f"cannot read the log-sink file {path}: it does not exist"
                ) from None
            # rotated away (or the current file not reopened yet) while being read
        except OSError as exc:
            raise ConfigurationError(f"cannot read the log-sink file {file}: {exc}") from exc
    return compare_log(str(path), logged.lines, logged, turns)


def load_anchors(path: Path) -> dict[StreamId, tuple[int, str]]:
    """The stream heads of an earlier ``verify --json`` report."""
    try:
        heads = json.loads(path.read_text("utf-8"))["streams"]["heads"]
        return {
            (h["session_id"], h["producer_id"]): (int(h["position"]), str(h["hash"])) for h in heads
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(
            f"{path} is not a verify --json report with stream heads: {exc!r}"
        ) from exc
