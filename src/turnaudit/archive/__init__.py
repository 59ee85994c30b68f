"""The archive: a topic's records kept past its retention, as sealed segments and signed
digests (docs/archive.md).

* ``segments``: the segment format (Avro Object Container Files, each record's original
  bytes, key, offset, timestamp and headers) and the segment names;
* ``digests``: the signed, chained digests listing every segment written;
* ``store``: the archive's directory, each file written once;
* ``writer``: one partition's archiver (cut, write, digest, resume after a restart);
* ``check``: every digest, segment and chain verified, each finding named;
* ``reading``: the archive read as the topic (``verify --archive``, ``replay --archive``;
  ``archive export``, ``turnaudit.replay.archive_export``, writes replay's jsonl lines of it).
"""
