"""Where a keyed record lands: the partition librdkafka's default partitioner
(``consistent_random``: CRC-32 of the key, modulo the partition count) gives its key.

The publisher keys each turn by its session and leaves the choice to that partitioner,
so a stream's partition is known from its session alone: ``verify --follow --keyring``
places the signed heads of a stream with the worker that will read its turns.
"""

from __future__ import annotations

import zlib


def key_partition(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` (librdkafka's ``consistent_random``
    for a key that is set)."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return zlib.crc32(key) % partitions


def session_partition(session_id: str, partitions: int) -> int:
    """The partition the publisher's turns of ``session_id`` land in."""
    return key_partition(session_id.encode(), partitions)
