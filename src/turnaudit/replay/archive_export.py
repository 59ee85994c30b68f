"""``turnaudit archive export``: an archive's turns as JSON Lines, read with the archive
alone (no broker), for a query engine to read (DuckDB's ``read_json``; docs/archive.md).

Each line is the line ``replay --into jsonl:`` writes for the record (its partition,
offset, writer version and decoded event, or why it is not one), partitions ascending,
each by offset. ``--parquet`` is ``turnaudit.archive.export_parquet`` (pyarrow, an
extra): the same records as rows of fixed columns.
"""

from __future__ import annotations

from pathlib import Path

from turnaudit.archive.reading import ExportSummary, archived_batches, whole_archive
from turnaudit.archive.store import ArchiveStore
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.replay.jsonl import JsonlOutput
from turnaudit.serialization.wire import TurnEventDeserializer


def export_jsonl(
    archive: ArchiveStore,
    topic: str,
    decode: TurnEventDeserializer,
    out: Path,
    surfaces: Redaction = DROPPED,
) -> ExportSummary:
    """Every archived record of ``topic`` as a line of ``out`` (replaced)."""
    segments, start, until = whole_archive(archive, topic)
    output = JsonlOutput(out, decode, surfaces)
    records = undecodable = 0
    try:
        output.open(0)
        for batch in archived_batches(archive, segments, start, until):
            undecodable += output.write(batch)
            records += len(batch)
        output.finish()
    finally:
        output.close()
    return ExportSummary(topic, records, undecodable, len(segments))
