"""Parked messages, read back: what ``turnaudit dlq`` lists, counts and redrives.

Pure: a dead letter becomes a :class:`Letter` whatever its headers hold (missing,
garbled or foreign headers are read as ``unknown``, never an error); a
:class:`LetterFilter` selects letters (every filter given must hold); a
:class:`Summary` counts them by reason, service, origin partition and hour; and
:func:`turnaudit.dlq_redrive.plan_redrive` decides, letter by letter, what goes
back to its topic.

A redrive writes the original bytes, key and headers back to the topic they were
read from, with ``turnaudit.redriven-from: dlq:<partition>:<offset>`` and
``turnaudit.redriven-origin: <topic>:<partition>:<offset>``. It is the same turn
(same event id, same bytes) as the parked original, so consumers that dedupe by
event id count it once; the headers found on the topic are what makes a second
redrive of the same letters skip them (:class:`RedrivenMarks`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypedDict

from turnaudit.dead_letters import (
    CONNECT_HEADER_PREFIX,
    HEADER_PREFIX,
    DeadLetterReason,
    is_dead_letter_header,
)
from turnaudit.records import Record, record_headers

UNKNOWN = "unknown"
_REASONS = frozenset(r.value for r in DeadLetterReason)
# Reasons a later fix (a schema announced or registered, a consumer upgraded) can cure:
# the bytes did not decode. A contract breach is in the event itself: it stays one.
REDRIVABLE = frozenset(
    {
        DeadLetterReason.UNKNOWN_FRAMING.value,
        DeadLetterReason.UNKNOWN_SCHEMA.value,
        DeadLetterReason.UNUSABLE_SCHEMA.value,
        DeadLetterReason.UNDECODABLE.value,
    }
)
_SERVICE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_NUMBER = re.compile(r"[0-9]{1,18}")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
Position = tuple[int, int]
Origin = tuple[str, int, int]


def header_text(value: bytes | None) -> str:
    return "" if value is None else value.decode(errors="replace")


def whole_number(text: str) -> int | None:
    return int(text) if _NUMBER.fullmatch(text) else None


def parse_position(text: str) -> Position:
    """``partition:offset`` of a letter on the dead-letter topic (``ValueError`` otherwise)."""
    partition, sep, offset = text.strip().partition(":")
    p, o = whole_number(partition), whole_number(offset)
    if not sep or p is None or o is None:
        raise ValueError(f"{text!r} is not a partition:offset like 0:42")
    return p, o


class LetterJson(TypedDict):
    position: str
    parked_at: str
    reason: str
    service: str
    stage: str
    error: str
    origin: str | None
    truncated: bool
    key: str | None
    size: int


@dataclass(frozen=True, slots=True)
class Letter:
    """One message of the dead-letter topic, its headers read (nothing here raises)."""

    partition: int  # on the dead-letter topic
    offset: int
    timestamp_ms: int  # when it was parked
    reason: str  # a DeadLetterReason value, or "unknown"
    service: str  # the consuming service (the stage's name before "/"), or "unknown"
    stage: str  # the stage header as written ("" when absent)
    error: str
    origin_topic: str | None
    origin_partition: int | None
    origin_offset: int | None
    truncated: bool
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()  # the original's own headers

    @property
    def position(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def origin(self) -> Origin | None:
        """Where the original was read (topic, partition, offset), when the headers say."""
        if (
            self.origin_topic is None
            or self.origin_partition is None
            or (self.origin_offset is None)
        ):
            return None
        return self.origin_topic, self.origin_partition, self.origin_offset

    @property
    def partition_label(self) -> str:
        return UNKNOWN if self.origin_partition is None else str(self.origin_partition)

    def as_json(self) -> LetterJson:
        origin = self.origin
        return LetterJson(
            position=self.position,
            parked_at=iso_ms(self.timestamp_ms),
            reason=self.reason,
            service=self.service,
            stage=self.stage,
            error=self.error,
            origin=None if origin is None else "{}:{}:{}".format(*origin),
            truncated=self.truncated,
            key=None if self.key is None else self.key.decode(errors="replace"),
            size=len(self.value or b""),
        )

    def line(self) -> str:
        origin = self.origin
        where = "?" if origin is None else "{}:{}:{}".format(*origin)
        cut = " (truncated)" if self.truncated else ""
        return (
            f"{self.position}  {iso_ms(self.timestamp_ms)}  {self.reason}  "
            f"{self.service}  from {where}{cut}  {' '.join(self.error.split())[:160]}"
        )


def iso_ms(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return UNKNOWN


def letter_of(
    partition: int,
    offset: int,
    timestamp_ms: int,
    headers: Sequence[tuple[str, bytes | None]],
    *,
    key: bytes | None = None,
    value: bytes | None = None,
) -> Letter:
    """A dead letter from its position, time and headers; ``dlq.*`` first, Kafka
    Connect's ``__connect.errors.*`` where ours are missing."""
    ours: dict[str, str] = {}
    connect: dict[str, str] = {}
    original: list[tuple[str, bytes | None]] = []
    for name, raw in headers:
        if name.startswith(HEADER_PREFIX):
            ours.setdefault(name[len(HEADER_PREFIX) :], header_text(raw))
        elif name.startswith(CONNECT_HEADER_PREFIX):
            connect.setdefault(name[len(CONNECT_HEADER_PREFIX) :], header_text(raw))
        if not is_dead_letter_header(name):
            original.append((name, raw))
    reason = ours.get("reason", "")
    stage = ours.get("stage", "")
    service = stage.partition("/")[0]
    topic = ours.get("topic") or connect.get("topic") or ""
    where_p = whole_number(ours.get("partition") or connect.get("partition") or "")
    where_o = whole_number(ours.get("offset") or connect.get("offset") or "")
    return Letter(
        partition=partition,
        offset=offset,
        timestamp_ms=timestamp_ms,
        reason=reason if reason in _REASONS else UNKNOWN,
        service=service if _SERVICE.fullmatch(service) else UNKNOWN,
        stage=stage,
        error=ours.get("error") or connect.get("exception.message") or "",
        origin_topic=topic if _TOPIC.fullmatch(topic) else None,
        origin_partition=where_p,
        origin_offset=where_o,
        truncated=ours.get("truncated") == "true",
        key=key,
        value=value,
        headers=tuple(original),
    )


def letter_from_record(record: Record) -> Letter:
    """A consumed dead letter (a record always has its position once consumed)."""
    _, stamp = record.timestamp()
    return letter_of(
        record.partition() or 0,
        record.offset() or 0,
        stamp,
        record_headers(record),
        key=record.key(),
        value=record.value(),
    )


# -- selecting -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LetterFilter:
    """What ``--reason``, ``--service``, ``--partition``, ``--since``/``--until`` select.

    An empty set selects all. A reason matches exactly or as a prefix before ``:``
    (``contract`` is every ``contract:*``); ``unknown`` selects letters without a
    reason we know. ``partitions`` are the origin topic's; times are when a letter
    was parked (``until`` exclusive).
    """

    reasons: frozenset[str] = frozenset()
    services: frozenset[str] = frozenset()
    partitions: frozenset[int] = frozenset()
    since_ms: int | None = None
    until_ms: int | None = None

    def matches(self, letter: Letter) -> bool:
        if self.reasons and not (
            letter.reason in self.reasons or letter.reason.partition(":")[0] in self.reasons
        ):
            return False
        if self.services and letter.service not in self.services:
            return False
        if self.partitions and letter.origin_partition not in self.partitions:
            return False
        if self.since_ms is not None and letter.timestamp_ms < self.since_ms:
            return False
        return self.until_ms is None or letter.timestamp_ms < self.until_ms

    def select(self, letters: Iterable[Letter]) -> list[Letter]:
        return [letter for letter in letters if self.matches(letter)]


class SummaryJson(TypedDict):
    count: int
    first_parked_at: str | None
    last_parked_at: str | None
    by_reason: dict[str, int]
    by_service: dict[str, int]
    by_partition: dict[str, int]
    by_hour: dict[str, int]


@dataclass(frozen=True, slots=True)
class Summary:
    """Letters counted by reason, service, origin partition and the hour they were parked."""

    count: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    by_reason: Mapping[str, int] = field(default_factory=dict)
    by_service: Mapping[str, int] = field(default_factory=dict)
    by_partition: Mapping[str, int] = field(default_factory=dict)
    by_hour: Mapping[str, int] = field(default_factory=dict)

    def as_json(self) -> SummaryJson:
        return SummaryJson(
            count=self.count,
            first_parked_at=None if self.first_ms is None else iso_ms(self.first_ms),
            last_parked_at=None if self.last_ms is None else iso_ms(self.last_ms),
            by_reason=dict(self.by_reason),
            by_service=dict(self.by_service),
            by_partition=dict(self.by_partition),
            by_hour=dict(self.by_hour),
        )

    def human(self) -> str:
        lines = [f"{self.count} dead letter(s)"]
        if self.first_ms is not None and self.last_ms is not None:
            lines[0] += f", parked {iso_ms(self.first_ms)} .. {iso_ms(self.last_ms)}"
        for title, counts in (
            ("reason", self.by_reason),
            ("service", self.by_service),
            ("partition", self.by_partition),
            ("hour", self.by_hour),
        ):
            if counts:
                lines.append(f"  by {title}: " + ", ".join(f"{k}={n}" for k, n in counts.items()))
        return "\n".join(lines)


def _hour(ms: int) -> str:
    text = iso_ms(ms)
    return text[:13] if text != UNKNOWN else UNKNOWN


def summarize(letters: Iterable[Letter]) -> Summary:
    reasons: Counter[str] = Counter()
    services: Counter[str] = Counter()
    partitions: Counter[str] = Counter()
    hours: Counter[str] = Counter()
    first: int | None = None
    last: int | None = None
    count = 0
    for letter in letters:
        count += 1
        reasons[letter.reason] += 1
        services[letter.service] += 1
        partitions[letter.partition_label] += 1
        hours[_hour(letter.timestamp_ms)] += 1
        first = letter.timestamp_ms if first is None else min(first, letter.timestamp_ms)
        last = letter.timestamp_ms if last is None else max(last, letter.timestamp_ms)
    return Summary(
        count,
        first,
        last,
        dict(sorted(reasons.items())),
        dict(sorted(services.items())),
        dict(sorted(partitions.items())),
        dict(sorted(hours.items())),
    )
