"""The typed events match the shipped schemas field by field, and decoded records."""

from __future__ import annotations

import json
import typing
from datetime import UTC, datetime
from typing import Any, get_args, get_origin, get_type_hints

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.events import encode, turn
from turnaudit import events
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer

CATALOG = shipped_catalog()
BY_VERSION: dict[int, type[Any]] = {
    1: events.TurnEventV1,
    2: events.TurnEventV2,
    3: events.TurnEventV3,
    4: events.TurnEventV4,
}


def _records(schema: Any, found: dict[str, dict[str, Any]]) -> None:
    """Every record schema in ``schema``, by name."""
    if isinstance(schema, list):
        for branch in schema:
            _records(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            found[schema["name"]] = schema
            for field in schema["fields"]:
                _records(field["type"], found)
        elif schema.get("type") == "array":
            _records(schema["items"], found)


@pytest.mark.parametrize("version", sorted(BY_VERSION))
def test_each_version_has_a_typed_dict_with_exactly_its_fields(version: int) -> None:
    records: dict[str, dict[str, Any]] = {}
    _records(json.loads(CATALOG.version(version).schema_json), records)
    for name, record in records.items():
        typed = BY_VERSION[version] if name == "TurnEvent" else getattr(events, name)
        fields = [f["name"] for f in record["fields"]]
        assert sorted(get_type_hints(typed)) == sorted(fields), name
        for field in record["fields"]:
            symbols = field["type"].get("symbols") if isinstance(field["type"], dict) else None
            if symbols:  # enums are Literals of exactly their symbols
                hint = get_type_hints(typed)[field["name"]]
                assert get_origin(hint) is typing.Literal
                assert sorted(get_args(hint)) == sorted(symbols)


@pytest.mark.parametrize("version", sorted(BY_VERSION))
def test_a_decoded_record_of_each_version_has_the_reader_shape(version: int) -> None:
    decoded = TurnEventDeserializer(CATALOG)(encode(turn("s-typed", 0, version=version)))
    required = events.TurnEvent.__required_keys__
    optional = events.TurnEvent.__optional_keys__
    assert required <= decoded.event.keys() <= required | optional
    assert optional == set()


@given(st.integers(min_value=events.MIN_MILLIS, max_value=events.MAX_MILLIS))
def test_occurred_at_millis_and_moment_convert_exactly_both_ways(millis: int) -> None:
    moment = events.occurred_moment(millis)
    assert moment.tzinfo is UTC
    assert events.occurred_millis(moment) == millis
    assert events.occurred_moment(moment) == moment  # a datetime passes through
    assert events.occurred_millis(millis) == millis


def test_the_millis_bounds_are_the_first_and_last_millisecond_a_date_holds() -> None:
    assert events.occurred_moment(events.MIN_MILLIS) == datetime.min.replace(tzinfo=UTC)
    assert events.occurred_moment(events.MAX_MILLIS) == datetime.max.replace(
        microsecond=999_000, tzinfo=UTC
    )
