"""Where librdkafka's built-in partitioners put a keyed message. Pure.

The publishers produce each turn keyed by its session id and name no partitioner, so
librdkafka's default, ``consistent_random``, places it: CRC-32 of the key modulo the
partition count (random only for a message without a key; ``turnaudit.kafka.partitioning``).
``verify --follow`` needs the partition of a stream none of whose turns arrived (a session
every turn of which was lost in a crash) to know which member judges it; the mapping of
each keyed partitioner librdkafka ships (``partitioner`` setting, e.g. through
``TURNAUDIT_KAFKA_OPTIONS``) is here. tests/broker/test_partitioner.py holds each to a real
producer's placement.
"""

from __future__ import annotations

from collections.abc import Callable

# ``consistent`` and ``consistent_random``: CRC-32 (as zlib's) of the key, the publishers'.
from turnaudit.kafka.partitioning import key_partition as crc32_partition

KeyPartitioner = Callable[[bytes, int], int]

DEFAULT_PARTITIONER = "consistent_random"
_MASK = 0xFFFFFFFF


def murmur2(key: bytes) -> int:
    """The Java client's murmur2 (seed 0x9747b28c), as an unsigned 32-bit value."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & _MASK
        k ^= k >> r
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= key[whole + 2] << 16
    if tail >= 2:
        h ^= key[whole + 1] << 8
    if tail >= 1:
        h ^= key[whole]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """``murmur2`` and ``murmur2_random``: the Java client's default placement."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def fnv1a(key: bytes) -> int:
    """32-bit FNV-1a."""
    h = 0x811C9DC5
    for byte in key:
        h = ((h ^ byte) * 0x01000193) & _MASK
    return h


def fnv1a_partition(key: bytes, partitions: int) -> int:
    """``fnv1a`` and ``fnv1a_random``: the Sarama (Go) client's default placement (the
    hash taken as a signed 32-bit value, its absolute value)."""
    h = fnv1a(key)
    return abs(h - 2**32 if h >= 2**31 else h) % partitions


_KEYED: dict[str, KeyPartitioner] = {
    "consistent": crc32_partition,
    "consistent_random": crc32_partition,
    "murmur2": murmur2_partition,
    "murmur2_random": murmur2_partition,
    "fnv1a": fnv1a_partition,
    "fnv1a_random": fnv1a_partition,
}


def key_partitioner(name: str | None) -> KeyPartitioner | None:
    """The placement of a keyed message under librdkafka's ``partitioner`` setting (None:
    the default); None for a partitioner that does not place by key (``random``) or is
    not one of librdkafka's."""
    return _KEYED.get(name or DEFAULT_PARTITIONER)
