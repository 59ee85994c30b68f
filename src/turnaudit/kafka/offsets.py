"""Times and ranges of a topic as offsets, in one place.

A range is asked for as a ``RangeSpec`` (Kafka timestamps and/or offsets per
partition) and answered as a ``ResolvedRange``: start and end (exclusive) per
partition, and the log start the range was resolved against. The arithmetic
is pure (``plan_range``, ``at_or_end``, ``check_partitions``): it clamps every
offset into the partition's retained log ``[log start, high watermark]``,
keeps each end at or after its start, turns offsets_for_times' "nothing at or
after that time" (-1) into the partition's end, and refuses a partition the
topic does not have. The rest asks the broker for the figures it works on
(watermarks, offsets for a time) with a short-lived consumer that joins no
group and commits nothing.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.events import occurred_millis
from turnaudit.kafka.admin import new_admin
from turnaudit.kafka.groups import own_group
from turnaudit.settings import KafkaSettings

# offsets_for_times' answer for a partition with no message at or after the time.
NO_OFFSET = -1


@dataclass(frozen=True)
class RangeSpec:
    """A range as asked for: ``since``/``until`` by Kafka timestamp (``until``
    exclusive), ``from_offsets``/``to_offsets`` per partition (applied after the
    times, for the partitions they name). Nothing given: the whole retained log."""

    since: datetime | None = None
    until: datetime | None = None
    from_offsets: Mapping[int, int] | None = None
    to_offsets: Mapping[int, int] | None = None


class EventWindow(NamedTuple):
    """Turns whose ``occurred_at`` (epoch milliseconds) is in ``[low, high)``."""

    low: int
    high: int

    def holds(self, occurred: int | datetime) -> bool:
        return self.low <= occurred_millis(occurred) < self.high


# The end of a window left open (``tail --time event`` has no end).
OPEN_END_MS = (1 << 63) - 1


def event_time_range(
    spec: RangeSpec, slack: timedelta | None, *, open_end: bool = False
) -> tuple[RangeSpec, EventWindow]:
    """The broker range to read for an event-time window, and the window.

    ``spec.since``/``spec.until`` select turns by ``occurred_at`` (``[since, until)``).
    The broker range is the whole retained stream, or, with ``slack``, the records
    stored from ``slack`` before ``since`` to ``slack`` after ``until`` by Kafka
    timestamp (for a stream whose turns are stored within ``slack`` of happening);
    ``from_offsets``/``to_offsets`` still apply. The one rule of ``replay``, ``verify``,
    ``eval rebuild`` and ``tail`` (``open_end``: no ``until``, the window never ends).
    """
    since, until = spec.since, spec.until
    if since is None or (until is None and not open_end):
        raise ConfigurationError("an event-time window needs both --from and --to")
    window = EventWindow(
        occurred_millis(since), OPEN_END_MS if until is None else occurred_millis(until)
    )
    if slack is None:
        return RangeSpec(None, None, spec.from_offsets, spec.to_offsets), window
    return RangeSpec(
        since - slack, None if until is None else until + slack, spec.from_offsets, spec.to_offsets
    ), window


class Watermarks(NamedTuple):
    """Per partition: the log start (first retained offset) and the high watermark."""

    low: dict[int, int]
    high: dict[int, int]


class ResolvedRange(NamedTuple):
    """A range as offsets: ``[start, end)`` per partition, every partition of the
    topic, ``log_start <= start <= end <= high watermark``.

    A named tuple, so ``start, end, log_start = resolve_range(...)`` still reads.
    """

    start: dict[int, int]
    end: dict[int, int]
    log_start: dict[int, int]

    @property
    def partitions(self) -> list[int]:
        return sorted(self.end)

    @property
    def from_log_start(self) -> bool:
        """Every partition starts at its log start (streams' first turns are in range)."""
        return all(self.start.get(p, 0) == self.log_start.get(p, 0) for p in self.end)

    @property
    def messages(self) -> int:
        """Offsets in the range (messages, where no offset is a transaction marker)."""
        return sum(e - self.start.get(p, 0) for p, e in self.end.items())


# -- pure arithmetic -----------------------------------------------------------------------


def check_partitions(topic: str, requested: Iterable[int], existing: Collection[int]) -> None:
    """Refuse (``ConfigurationError``) a partition ``topic`` does not have."""
    missing = sorted(set(requested) - set(existing))
    if missing:
        raise ConfigurationError(f"{topic} has no partition {', '.join(map(str, missing))}")


def at_or_end(found: Mapping[int, int], high: Mapping[int, int]) -> dict[int, int]:
    """offsets_for_times answers for every partition of ``high``: a partition with no
    message at or after the time (``NO_OFFSET``, any negative, or no answer) is at its end."""
    return {p: found[p] if found.get(p, NO_OFFSET) >= 0 else h for p, h in high.items()}


def _clamp(offset: int, low: int, high: int) -> int:
    return min(max(offset, low), high)


def plan_range(
    topic: str,
    spec: RangeSpec,
    marks: Watermarks,
    *,
    since: Mapping[int, int] | None = None,
    until: Mapping[int, int] | None = None,
) -> ResolvedRange:
    """The offsets of ``spec`` on a topic with these watermarks, ``since``/``until``
    being the broker's offsets_for_times answers for ``spec.since``/``spec.until``.

    Start: the time's offset, else the log start; a ``from_offsets`` entry wins for
    its partition. End: likewise with ``until``/``to_offsets``, else the high
    watermark. Every offset is then clamped into ``[log start, high]`` and every
    end kept at or after its start (an empty range, never a negative one).
    """
    low, high = marks
    check_partitions(topic, spec.from_offsets or {}, high)
    check_partitions(topic, spec.to_offsets or {}, high)
    start = dict(low) if since is None else at_or_end(since, high)
    end = dict(high) if until is None else at_or_end(until, high)
    start.update(spec.from_offsets or {})
    end.update(spec.to_offsets or {})
    clamped_start = {p: _clamp(start[p], low[p], high[p]) for p in sorted(high)}
    clamped_end = {p: _clamp(end[p], clamped_start[p], high[p]) for p in sorted(high)}
    return ResolvedRange(clamped_start, clamped_end, {p: low[p] for p in sorted(high)})


# -- asking the broker ---------------------------------------------------------------------

# librdkafka's own log lines (one per failed connection attempt) stay off stderr.
_QUIET = {"log_level": 0}
# Right after a topic is created a leader may not be known yet; librdkafka does
# not flag every such error as retriable.
_LEADERSHIP_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


@contextmanager
def _probe(settings: KafkaSettings, topic: str) -> Iterator[Consumer]:
    """A consumer that only asks for offsets (no group joined, nothing committed);
    librdkafka's failures come out as ``BrokerError``."""
    consumer = Consumer(
        settings.client_config(_QUIET, **{"group.id": own_group(settings, "offsets")})
    )
    try:
        yield consumer
    except KafkaException as exc:
        raise BrokerError(f"cannot read offsets of {topic}: {exc}") from exc
    finally:
        consumer.close()


def _partitions(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout)
    error = metadata.topics[topic].error if topic in metadata.topics else None
    if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        # A topic the principal may not describe looks absent to it; say which it is.
        raise BrokerError(f"not authorized for topic {topic} (TOPIC_AUTHORIZATION_FAILED)")
    if topic not in metadata.topics or error is not None:
        raise BrokerError(f"topic {topic} does not exist")
    return sorted(metadata.topics[topic].partitions)


def _watermarks(consumer: Consumer, topic: str, timeout: float) -> Watermarks:
    partitions = _partitions(consumer, topic, timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            low: dict[int, int] = {}
            high: dict[int, int] = {}
            for p in partitions:
                low[p], high[p] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=timeout
                )
            return Watermarks(low, high)
        except KafkaException as exc:
            error = exc.args[0]
            transient = error.retriable() or error.code() in _LEADERSHIP_ERRORS
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _offsets_for_time(
    consumer: Consumer, topic: str, partitions: Iterable[int], moment: datetime, timeout: float
) -> dict[int, int]:
    """The broker's answers: per partition the first offset stored at or after ``moment``,
    ``NO_OFFSET`` where there is none."""
    millis = occurred_millis(moment)
    found = consumer.offsets_for_times(
        [TopicPartition(topic, p, millis) for p in partitions], timeout=timeout
    )
    return {tp.partition: tp.offset for tp in found}


def watermarks(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> Watermarks:
    """Log start and high watermark of every partition of ``topic``."""
    with _probe(settings, topic) as consumer:
        return _watermarks(consumer, topic, timeout)


def end_offsets(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """The high watermark of every partition of ``topic``."""
    return watermarks(settings, topic, timeout).high


def offsets_at(
    settings: KafkaSettings, topic: str, moment: datetime | None, timeout: float = 10.0
) -> dict[int, int]:
    """Where a reader starting at ``moment`` begins, every partition: the first offset
    stored at or after it, the partition's end where there is none; the end now
    without a ``moment`` (resolved now, not at a first fetch)."""
    if moment is None:
        return end_offsets(settings, topic, timeout)
    return resolve_range(settings, topic, RangeSpec(since=moment), timeout).start


class BrokerAnswers(NamedTuple):
    """What the broker says of a range's times now: the watermarks, and per partition
    offsets_for_times' answers for ``spec.since``/``spec.until`` (None: no such time)."""

    marks: Watermarks
    since: dict[int, int] | None
    until: dict[int, int] | None


def broker_answers(
    settings: KafkaSettings, topic: str, spec: RangeSpec, timeout: float = 10.0
) -> BrokerAnswers:
    """The figures ``plan_range`` works on, asked of the broker now."""
    with _probe(settings, topic) as consumer:
        marks = _watermarks(consumer, topic, timeout)
        partitions = sorted(marks.high)
        since = until = None
        if spec.since is not None:
            since = _offsets_for_time(consumer, topic, partitions, spec.since, timeout)
        if spec.until is not None:
            until = _offsets_for_time(consumer, topic, partitions, spec.until, timeout)
    return BrokerAnswers(marks, since, until)


def resolve_range(
    settings: KafkaSettings, topic: str, spec: RangeSpec, timeout: float = 10.0
) -> ResolvedRange:
    """The offsets of ``spec`` on ``topic`` now (see ``plan_range``)."""
    marks, since, until = broker_answers(settings, topic, spec, timeout)
    return plan_range(topic, spec, marks, since=since, until=until)


def delete_records_before(
    settings: KafkaSettings, topic: str, offsets: Mapping[int, int], timeout: float = 30.0
) -> dict[int, int]:
    """Move the log start of ``topic``'s partitions to ``offsets`` (every record before
    is deleted), as time retention does; returns the new log start per partition.

    For tests and drills of retention (``delete_records`` needs the topic's delete ACL)."""
    admin = new_admin(settings.client_config(_QUIET))
    wanted = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
    try:
        futures = admin.delete_records(wanted, request_timeout=timeout, operation_timeout=timeout)
        return {
            tp.partition: future.result(timeout).low_watermark for tp, future in futures.items()
        }
    except KafkaException as exc:
        raise BrokerError(f"cannot delete records of {topic}: {exc}") from exc
