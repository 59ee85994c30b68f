"""Canonical JSON: what every replay line, digest and checkpoint map is written as."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

_ORJSON = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8; bytes as hex, datetimes as ``isoformat()`` writes
    them (orjson's own RFC 3339 rendering is the same text, without a Python call)."""
    return orjson.dumps(value, default=_jsonable, option=_ORJSON)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def by_partition(found: Mapping[int, int]) -> dict[str, int]:
    """``{partition: offset}`` as JSON keys them: strings, in partition order."""
    return {str(p): o for p, o in sorted(found.items())}


def partitions(raw: Mapping[str, Any]) -> dict[int, int]:
    """The inverse of :func:`by_partition` (``ValueError``/``TypeError`` on anything else)."""
    return {int(p): int(o) for p, o in raw.items()}
