"""``turnaudit archive export --parquet``: an archive's turns as one Parquet file of fixed
columns (``turnaudit.archive.export_columns``), read with the archive alone (no broker).

A row per archived record of the topic, partitions ascending, each by offset: its place,
and its decoded event's fields (surfaces and tool I/O as the redaction policy says), or
why it is no turn. A row group per segment read, so memory holds one segment's rows. The
file is written under a temporary name beside ``out`` and renamed onto it when whole: a
failed export leaves no half file, and the old one stays until the new one is complete.
Owner-only, like every file holding what turns said.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from turnaudit.archive.export_columns import TURN_SCHEMA, TurnRowPlace, turn_row
from turnaudit.archive.reading import (
    ArchivedMessage,
    ExportSummary,
    archived_batches,
    whole_archive,
)
from turnaudit.archive.store import ArchiveStore
from turnaudit.files import open_private
from turnaudit.redaction import DROPPED, Redaction
from turnaudit.serialization.wire import TurnEventDeserializer

# Parquet's own compression: what DuckDB, Spark and pandas all read.
COMPRESSION = "zstd"


def export_parquet(
    archive: ArchiveStore,
    topic: str,
    decode: TurnEventDeserializer,
    out: Path,
    surfaces: Redaction = DROPPED,
) -> ExportSummary:
    """Every archived record of ``topic`` as a row of ``out`` (replaced when complete)."""
    segments, start, until = whole_archive(archive, topic)
    partial = out.with_name(f".{out.name}.partial")
    records = undecodable = 0
    try:
        with open_private(partial, "wb") as sink:
            writer = pq.ParquetWriter(sink, TURN_SCHEMA, compression=COMPRESSION)
            try:
                for batch in archived_batches(archive, segments, start, until):
                    rows, bad = turn_rows(decode, batch, surfaces)
                    writer.write_table(pa.Table.from_pylist(rows, schema=TURN_SCHEMA))
                    records += len(rows)
                    undecodable += bad
            finally:
                writer.close()
            sink.flush()
            os.fsync(sink.fileno())
        partial.replace(out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return ExportSummary(topic, records, undecodable, len(segments))


def turn_rows(
    decode: TurnEventDeserializer,
    batch: Sequence[ArchivedMessage],
    surfaces: Redaction = DROPPED,
) -> tuple[list[dict[str, object]], int]:
    """The rows of ``batch``, and how many of its records are no turn."""
    rows, undecodable = [], 0
    for msg in batch:
        stored = msg.stored
        place: TurnRowPlace = {
            "partition": stored.partition,
            "offset": stored.offset,
            "timestamp": stored.timestamp,
            "error": None,
            "writer_version": None,
        }
        try:
            decoded = decode(stored.value)
        except Exception as exc:  # the decoder raises several types; the row records which
            place["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(turn_row(place, None))
            undecodable += 1
            continue
        place["writer_version"] = decoded.writer_version
        rows.append(turn_row(place, surfaces.event(decoded.event)))
    return rows, undecodable
