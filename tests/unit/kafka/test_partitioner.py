"""librdkafka's keyed placements, computed: the hashes against their published vectors, and
each placement a partition of the topic whatever the key (tests/broker/test_partitioner.py
holds them to a real producer)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnaudit.kafka.partitioner import (
    crc32_partition,
    fnv1a,
    fnv1a_partition,
    key_partitioner,
    murmur2,
    murmur2_partition,
)


def signed(value: int) -> int:
    return value - 2**32 if value >= 2**31 else value


@pytest.mark.parametrize(
    ("key", "java"),
    [  # Kafka's UtilsTest.testMurmur2: what the Java client's Utils.murmur2 returns
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_is_the_java_clients(key: bytes, java: int) -> None:
    assert signed(murmur2(key)) == java


@pytest.mark.parametrize(
    ("key", "expected"),
    [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)],  # the FNV reference
)
def test_fnv1a_is_the_reference_32_bit_hash(key: bytes, expected: int) -> None:
    assert fnv1a(key) == expected


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_every_keyed_placement_is_a_partition_of_the_topic(key: bytes, partitions: int) -> None:
    assert crc32_partition(key, partitions) == zlib.crc32(key) % partitions
    for place in (crc32_partition, murmur2_partition, fnv1a_partition):
        assert 0 <= place(key, partitions) < partitions


@pytest.mark.parametrize(
    ("name", "place"),
    [
        (None, crc32_partition),  # librdkafka's default: consistent_random
        ("consistent", crc32_partition),
        ("consistent_random", crc32_partition),
        ("murmur2", murmur2_partition),
        ("murmur2_random", murmur2_partition),
        ("fnv1a", fnv1a_partition),
        ("fnv1a_random", fnv1a_partition),
        ("random", None),  # does not place by key
        ("sticky", None),  # not one of librdkafka's
    ],
)
def test_each_partitioner_setting_names_its_placement(name: str | None, place: object) -> None:
    assert key_partitioner(name) is place
