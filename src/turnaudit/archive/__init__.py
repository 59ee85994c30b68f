"""The archive: a topic's records kept past its retention, as sealed segments and signed
digests (docs/archive.md).

* ``segments``: the segment format (Avro Object Container Files, each record's original
  bytes, key, offset, timestamp and headers) and the segment names;
* ``digests``: the signed, chained digests listing every segment written;
* ``store``: the archive's directory, each file written once;
* ``writer``: one partition's archiver (cut, write, digest, resume after a restart);
* ``check``: every digest, segment and chain verified, each finding named;
* ``reading``: the archive read as the topic (``verify --archive``, ``replay --archive``,
  ``eval rebuild --archive``; ``archive export --jsonl``, ``turnaudit.replay.archive_export``,
  writes replay's jsonl lines of it);
* ``export_columns``, ``export_parquet``: ``archive export --parquet``, the turns as Parquet
  of one fixed Arrow schema (pyarrow: the ``parquet`` extra, imported only by the export).
"""
