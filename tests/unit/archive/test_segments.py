"""Segments: any record sequence round-trips through a segment unchanged (keys, values and
header values None apart from empty, header order, timestamps and their type); a segment's
bytes follow from its records alone; names and paths are one another's inverse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.archive import partition_records
from turnaudit.archive.segments import (
    CODECS,
    ArchivedRecord,
    SegmentName,
    decode_segment,
    encode_segment,
)
from turnaudit.records import StoredRecord


@pytest.mark.parametrize("codec", CODECS)
@given(records=partition_records(max_size=60))
def test_any_record_sequence_round_trips_through_a_segment_unchanged(
    codec: str, records: list[ArchivedRecord]
) -> None:
    assert list(decode_segment(encode_segment(records, codec))) == records


@given(records=partition_records())
def test_a_segment_written_twice_from_the_same_records_is_the_same_bytes(
    records: list[ArchivedRecord],
) -> None:
    assert encode_segment(records) == encode_segment(list(records))


@given(records=partition_records(), other=partition_records())
def test_segments_of_different_records_differ(
    records: list[ArchivedRecord], other: list[ArchivedRecord]
) -> None:
    if records != other:
        assert encode_segment(records) != encode_segment(other)


@given(
    key=st.none() | st.binary(max_size=8),
    value=st.none() | st.binary(max_size=64),
    headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
    offset=st.integers(0, 2**50),
    timestamp=st.integers(0, 2**42),
)
def test_a_consumed_record_is_archived_with_everything_a_consumer_read(
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    offset: int,
    timestamp: int,
) -> None:
    stored = StoredRecord("t.turn-events", 3, offset, key, value, tuple(headers), timestamp)
    archived = ArchivedRecord.of(stored)
    assert archived == ArchivedRecord(
        "t.turn-events", 3, offset, timestamp, 1, key, value, tuple(headers)
    )
    (back,) = decode_segment(encode_segment([archived]))
    assert (back.key, back.value, list(back.headers)) == (key, value, headers)


def test_a_record_without_a_position_is_not_archived() -> None:
    class Positionless(StoredRecord):
        def offset(self) -> int | None:
            return None

    with pytest.raises(ValueError, match="position"):
        ArchivedRecord.of(Positionless("t", 0, 0))


@given(
    topic=st.text("abc.-_", min_size=1, max_size=10),
    partition=st.integers(0, 1000),
    first=st.integers(0, 10**19),
    span=st.integers(0, 10**6),
)
def test_a_segment_name_parses_back_from_its_path(
    topic: str, partition: int, first: int, span: int
) -> None:
    name = SegmentName(topic, partition, first, first + span)
    folder, file_name = name.path().rsplit("/", 1)
    assert folder == f"{topic}/{partition}/segments"
    assert SegmentName.parse(topic, partition, file_name) == name


@pytest.mark.parametrize(
    "file_name",
    ["1-2.avro", "00000000000000000002-00000000000000000001.avro", "x.avro", "a" * 46],
)
def test_a_file_name_that_is_no_segment_name_parses_to_none(file_name: str) -> None:
    assert SegmentName.parse("t", 0, file_name) is None


@pytest.mark.parametrize("data", [b"", b"Obj\x01", b"not avro at all", b"Obj\x01" + b"\xff" * 40])
def test_bytes_that_are_no_segment_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a readable segment"):
        list(decode_segment(data))
