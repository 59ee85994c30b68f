"""The metrics service's native batch step against the record-by-record path.

``TurnEventValidation.examine_batch`` (given a tallying sink: ordinary turns by
``ConsumeStep``, every other message through ``examine``/``conclude`` and ``take``) hands
over what ``hand_over`` (record by record) does: the same ``HandedBatch``, the same
rejections in the same order, the same samples in the registry (the runtime's counters
and the sink's) and the same stream tracker state, over any batches of chained turns of
every shipped version, with late turns, undecodable bytes, empty values, wrong keys, duplicates,
redeliveries, gaps, chain breaks, breaching and producer-recorded breaches, redriven
headers, a schema learned at run time and partitions forgotten between batches mixed in.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.events import breaking_events, encode
from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime import ConsumedTurn, Rejection, Sink, TurnEventValidation
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.handover import HandedBatch, hand_over
from turnaudit.consumers.runtime.settings import MetricsSettings
from turnaudit.dead_letters import REDRIVEN_FROM_HEADER
from turnaudit.identity import TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.records import Record
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

CATALOG = shipped_catalog()
SERIALIZERS = {s.version: SingleObjectSerializer(s) for s in CATALOG.versions}
# A writer schema no catalog ships: v5 with one more field, known only at run time.
_LEARNED_JSON = json.loads(CATALOG.version(5).schema_json)
_LEARNED_JSON["fields"].append({"name": "learned_extra", "type": "string", "default": ""})
LEARNED_TEXT = json.dumps(_LEARNED_JSON)
LEARNED = schema_from_json(LEARNED_TEXT, name="turn_event", version=-1)
LEARNED_ENCODE = SingleObjectSerializer(LEARNED)
NOW_S = 1_900_000_000.0  # the sinks' clock: the delay histogram the same in both


def learned(fingerprint: bytes) -> str | None:
    """The schemas topic of the test: it holds the learned schema."""
    return LEARNED_TEXT if fingerprint == LEARNED.fingerprint else None


class Message:
    """What the runtime reads of a consumed message (confluent-kafka's methods)."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_value")

    def __init__(
        self,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        offset: int,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        self._value, self._key = value, key
        self._partition, self._offset, self._headers = partition, offset, headers

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers


class ServiceUnderTest:
    """One consumer service's validation and sink on a registry of its own, the ordinary
    turns native (``examine_batch``) or record by record (``hand_over``); ``taken``: the
    turns that reached the sink's ``take`` (the Python path), counted before the step is
    given the sink."""

    def __init__(self, native: bool, sink: Callable[[CollectorRegistry], Sink]) -> None:
        self.native = native
        self.registry = CollectorRegistry()
        self.rejections: list[tuple[int, int, str, str]] = []
        decode = TurnEventDeserializer(CATALOG, resolver=learned)
        self.metrics = ConsumerMetrics(self.registry)
        self.validation = TurnEventValidation(decode, self.metrics, max_sessions=1000)
        self.sink = sink(self.registry)
        self.taken: list[ConsumedTurn] = []
        take = self.sink.take

        def counted(turn: ConsumedTurn) -> None:
            self.taken.append(turn)
            take(turn)

        self.sink.take = counted  # type: ignore[method-assign]  # the Python path, counted
        if native:
            self.validation.deliver_to(self.sink, self.reject)

    def reject(self, record: Record, rejection: Rejection) -> None:
        self.rejections.append(
            (record.partition() or 0, record.offset() or 0, rejection.reason.value, rejection.error)
        )

    def batch(self, records: list[Message]) -> HandedBatch:
        if self.native:
            handed = self.validation.examine_batch(records)  # type: ignore[arg-type]  # duck-typed
            assert handed is not None  # the native path was taken
        else:
            handed = hand_over(records, self.validation.examine, self.sink.take, self.reject)  # type: ignore[arg-type]  # duck-typed
        self.after_batch(handed)
        return handed

    def after_batch(self, handed: HandedBatch) -> None:
        """What the runtime does after a batch is handed over."""
        self.sink.flush()

    def samples(self) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for metric in self.registry.collect()
            for s in metric.samples
            if not s.name.endswith("_created")  # the moment a series was made
        )


class Service(ServiceUnderTest):
    """The metrics service."""

    sink: VerdictMetricsSink

    def __init__(self, native: bool) -> None:
        super().__init__(
            native,
            lambda registry: VerdictMetricsSink(
                MetricsSettings(label_limit=3), registry, clock=lambda: NOW_S
            ),
        )


def chained_turns(seed: int, count: int, versions: list[int]) -> list[tuple[bytes, bytes]]:
    """(key, value) of stamped turns, each in its drawn shipped version (or the learned
    schema, version 0)."""
    sim = TurnRuntimeSimulator(seed, schema_versions=(5,), concurrent_sessions=4)
    stamper = TurnStamper()
    out = []
    for event, version in zip(sim.events(count), versions, strict=False):
        stamper.stamp(event)
        if version == 0:
            value = LEARNED_ENCODE(event)
        else:
            event["verdicts"]["schema_version"] = version
            value = SERIALIZERS[version](event)
        stamper.commit(event, value)
        out.append((event["session_id"].encode(), value))
    return out


def breaching(n: int, version: int) -> tuple[bytes, bytes]:
    event = copy.deepcopy(list(breaking_events().values())[n % 4])
    event["verdicts"]["schema_version"] = version
    event["event_id"] = f"{event['event_id']}-{n}-{version}"
    return event["session_id"].encode(), encode(event)


def recorded(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A v4/v5 turn with a producer-recorded breach (the rest as sent)."""
    decoded = TurnEventDeserializer(CATALOG, resolver=learned)(value).event
    event = {
        **decoded,
        "breaches": ["refusal_hedge_exclusive"],
        "event_id": decoded["event_id"] + "-r",
    }
    return key, SERIALIZERS[max(4, decoded["verdicts"]["schema_version"])](event)


Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]


def extra_row(kind: str, n: int, some: tuple[bytes, bytes], draw: st.DrawFn) -> Row:
    """A message outside the ordinary case: (key, value, headers)."""
    key, value = some
    rows: dict[str, Callable[[], Row]] = {
        "garbage": lambda: (b"x", b"not avro at all", None),
        "empty": lambda: (b"x", None, None),
        "truncated": lambda: (key, value[: len(value) // 2], None),
        "wrong_key": lambda: (b"not-the-session", value, None),
        "no_key": lambda: (None, value, None),
        "duplicate": lambda: (key, value, None),
        "breach": lambda: (*breaching(n, draw(st.sampled_from([2, 3, 4, 5]))), None),
        "recorded": lambda: (*recorded(key, value), None),
        "redriven": lambda: (key, value, [(REDRIVEN_FROM_HEADER, b"t:0:1")]),
        "other_header": lambda: (key, value, [("trace", b"x")]),
    }
    return rows[kind]()


EXTRAS = (
    "garbage",
    "empty",
    "truncated",
    "wrong_key",
    "no_key",
    "duplicate",
    "breach",
    "recorded",
    "redriven",
    "other_header",
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[Message]], list[set[int]]]:
    count = draw(st.integers(1, 40))
    versions = draw(
        st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 5, 5, 3, 4]), min_size=count, max_size=count)
    )
    turns = chained_turns(draw(st.integers(0, 50)), count, versions)
    rows: list[Row] = [(k, v, None) for k, v in turns]
    for i in sorted(draw(st.sets(st.integers(0, len(rows) - 1), max_size=3)), reverse=True):
        del rows[i]  # a gap (and the chain broken past it)
    for _ in range(draw(st.integers(0, 2)) if rows else 0):  # late turns: gaps closed
        i, j = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, len(rows) - 1))
        rows[i], rows[j] = rows[j], rows[i]
    for n in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(EXTRAS))
        at = draw(st.integers(0, len(rows)))
        some = turns[draw(st.integers(0, len(turns) - 1))]
        extra = extra_row(kind, n, some, draw)
        rows.insert(at, extra)
    partitions = draw(st.integers(1, 3))
    offsets = [0] * partitions
    messages = []
    for key, value, headers in rows:
        p = (
            (key or b"").__len__() % partitions
            if draw(st.booleans())
            else draw(st.integers(0, partitions - 1))
        )
        messages.append(Message(value, key, p, offsets[p], headers))
        offsets[p] += 1
    # Cut anywhere; a batch may be read again (a redelivery after a failed flush).
    cuts = sorted(draw(st.lists(st.integers(0, len(messages)), max_size=4)))
    out = [messages[a:b] for a, b in zip([0, *cuts], [*cuts, len(messages)], strict=True)]
    if out and draw(st.booleans()):
        again = draw(st.integers(0, len(out) - 1))
        out.insert(again + 1, out[again])
    forgotten = [set(draw(st.lists(st.integers(0, 2), max_size=2))) for _ in out]
    return out, forgotten


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_native_batch_step_hands_over_what_record_by_record_does(
    drawn: tuple[list[list[Message]], list[set[int]]],
) -> None:
    cut, forgotten = drawn
    reference, native = Service(native=False), Service(native=True)
    for records, forget in zip(cut, forgotten, strict=True):
        assert native.batch(records) == reference.batch(records)
        assert native.rejections == reference.rejections
        for service in (reference, native):
            service.validation.forget_partitions(forget)
    assert native.samples() == reference.samples()
    assert native.sink.counted == reference.sink.counted
    assert tracker_state(native) == tracker_state(reference)


def tracker_state(service: Service) -> tuple[Any, ...]:
    """What the stream tracker holds, as values (its pickled tables list hash maps in
    their own order)."""
    tracker = service.validation._streams.tracker
    return (
        tracker.heads(),
        tracker.missing(),
        tracker.last_positions(),
        tracker.remembered_items(),
        tracker.stream_counts(),
        tracker.untracked_missing(),
        tracker.new_turns,
        tracker.currently_missing,
        len(tracker),
    )


def test_ordinary_turns_of_every_scanned_version_are_tallied_natively() -> None:
    """The step takes v3, v4 and v5 (single-object): a batch of such turns reaches the
    sink's tallies with no ``take`` at all."""
    turns = chained_turns(7, 30, [3, 4, 5] * 10)
    service = Service(native=True)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    handed = service.batch(records)
    assert handed == HandedBatch(next_offsets={0: 30}, handed=30)
    assert service.taken == []
    assert service.sink.counted == 30
