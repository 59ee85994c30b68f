"""The argparse types the commands share: round trips and every kind of bad value."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnaudit.argparsing import iso_time, non_negative_int, partition_offsets

offsets = st.dictionaries(st.integers(0, 10_000), st.integers(0, 2**62), min_size=1)


@given(offsets)
def test_partition_offsets_read_back_what_was_written(found: dict[int, int]) -> None:
    assert partition_offsets(",".join(f"{p}:{o}" for p, o in found.items())) == found


@pytest.mark.parametrize("text", ["", "0", "0:x", "a:1", "0:-1", "-1:0", "0:1:2", ","])
def test_partition_offsets_refuse_what_is_not_a_list_of_pairs(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        partition_offsets(text)


@given(st.integers(0, 2**40))
def test_non_negative_int_takes_zero_and_up(value: int) -> None:
    assert non_negative_int(str(value)) == value


@pytest.mark.parametrize("text", ["-1", "x", "1.5", ""])
def test_non_negative_int_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        non_negative_int(text)


def test_iso_time_without_a_zone_is_utc() -> None:
    assert iso_time("2026-12-03T10:00:00") == datetime(2026, 12, 3, 10, tzinfo=UTC)
    with pytest.raises(argparse.ArgumentTypeError):
        iso_time("yesterday")
