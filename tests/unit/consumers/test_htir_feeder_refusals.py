"""The HTIR feeder's delivery reports, against a fake producer that batches as
librdkafka does: every message queued for a partition when it sends goes in
one batch, and a batch holding a record over the topic's limit is refused
whole (MSG_SIZE_TOO_LARGE), the records that fit in it included.

The contract (consumers/htir_feeder.py): a trace refused as too large goes
again alone, up to ``SIZE_RETRIES`` times; refused alone (or out of retries)
it is logged once as refused for good and its turns' offsets stay held; a
trace that fits is stored. A transient failure is produced again at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from confluent_kafka import KafkaError
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.support.events import encode, task_turn
from tests.support.sinks import deliver
from turnaudit.consumers.htir_feeder import SIZE_RETRIES, HtirFeederSink
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.kafka.producer import DeliveryCallback, DeliveryError
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import DecodedTurnEvent, TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

SETTINGS = KafkaSettings(topics=TopicNames("t."))
TRACES = SETTINGS.topics.htir_traces
TURNS = "t.turn-events"
LIMIT = 4096  # the traces topic's max.message.bytes, as the fake broker holds it
SMALL, BIG = 2, 150  # task steps: a 2-step trace is ~200 B, a 150-step one ~10 KB
DECODE = TurnEventDeserializer(shipped_catalog())


class Outcome(Enum):
    STORED = "stored"
    TOO_LARGE = "too_large"  # the broker refused its batch for a record's size
    TRANSIENT = "transient"  # the connection dropped under it


ERRORS = {
    Outcome.TOO_LARGE: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE),
    Outcome.TRANSIENT: KafkaError(KafkaError._TRANSPORT),
}


@dataclass(frozen=True)
class Sent:
    topic: str
    value: bytes | None
    key: bytes | None
    report: DeliveryCallback | None


@dataclass
class Message:
    """The message a delivery report is about (``DeliveredMessage``)."""

    sent: Sent

    def topic(self) -> str | None:
        return self.sent.topic

    def partition(self) -> int | None:
        return 0

    def offset(self) -> int | None:
        return None

    def key(self) -> bytes | None:
        return self.sent.key

    def value(self) -> bytes | None:
        return self.sent.value

    def headers(self) -> Sequence[tuple[str, bytes | None]] | None:
        return None

    def latency(self) -> float | None:
        return None


@dataclass
class FakeProducer:
    """Queues what is produced; ``poll``/``flush`` send it and serve the
    reports. Each topic has one partition, so whatever is queued for the traces
    topic when it sends is one batch (sharing at its worst). ``outcome`` decides a batch's fate from
    the records in it (by default, the size rule above)."""

    outcome: Callable[[list[Sent]], list[Outcome]] | None = None
    queue: list[Sent] = field(default_factory=list)
    batches: list[list[Sent]] = field(default_factory=list)  # the traces topic's, as sent
    stored: list[bytes] = field(default_factory=list)  # keys (task ids) on the traces topic
    flushes: int = 0

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
        serve_reports: bool = True,
    ) -> None:
        self.queue.append(Sent(topic, value, key, on_delivery))

    def poll(self, timeout: float = 0.0) -> int:
        self._send()
        return 0

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        self._send()
        return 0

    def produced(self, task_id: str) -> int:
        return sum(sent.key == task_id.encode() for batch in self.batches for sent in batch)

    def _send(self) -> None:
        queue, self.queue = self.queue, []
        by_topic: dict[str, list[Sent]] = {}
        for sent in queue:
            by_topic.setdefault(sent.topic, []).append(sent)
        for topic, batch in by_topic.items():
            if topic != TRACES:
                outcomes = [Outcome.STORED] * len(batch)
            else:
                self.batches.append(batch)
                outcomes = (self.outcome or size_rule)(batch)
            for sent, outcome in zip(batch, outcomes, strict=True):
                err: DeliveryError | None = ERRORS.get(outcome)
                if outcome is Outcome.STORED and topic == TRACES:
                    assert sent.key is not None
                    self.stored.append(sent.key)
                if sent.report is not None:
                    sent.report(err, Message(sent))


def size_rule(batch: list[Sent]) -> list[Outcome]:
    """The broker's: one record over the limit refuses the whole batch."""
    refused = any(len(sent.value or b"") > LIMIT for sent in batch)
    return [Outcome.TOO_LARGE if refused else Outcome.STORED] * len(batch)


@dataclass(frozen=True)
class Task:
    task_id: str
    steps: int
    partition: int  # of its turns on the turn topic
    first_offset: int


@functools.cache
def decoded_turn(n: int, step: int, last: int) -> DecodedTurnEvent:
    """Task ``n``'s turn ``step`` (decoded once: the property tests reuse them)."""
    return DECODE(encode(task_turn(f"s-{n}", f"task-{n}", step, last=last)))


def stream(
    sizes: Sequence[int], partitions: Sequence[int]
) -> tuple[list[Task], list[ConsumedTurn]]:
    """Each task's turns, one task after the other, on the given turn partitions."""
    tasks: list[Task] = []
    turns: list[ConsumedTurn] = []
    next_offset: dict[int, int] = {}
    for n, (steps, partition) in enumerate(zip(sizes, partitions, strict=True)):
        tasks.append(Task(f"task-{n}", steps, partition, next_offset.get(partition, 0)))
        for step in range(steps):
            offset = next_offset.get(partition, 0)
            next_offset[partition] = offset + 1
            turns.append(
                ConsumedTurn(
                    decoded_turn(n, step, steps - 1),
                    SequenceCheck(SequenceOutcome.IN_ORDER),
                    TURNS,
                    partition,
                    offset,
                )
            )
    return tasks, turns


def feeder(producer: FakeProducer) -> HtirFeederSink:
    return HtirFeederSink(
        SETTINGS, registry=CollectorRegistry(), idle_timeout=3600, producer=producer
    )


def settle(sink: HtirFeederSink, producer: FakeProducer, tasks: int) -> None:
    """The runtime's polls (``tick``): more than the retries need (one alone per
    poll), so a produce on every poll would show."""
    for _ in range(6 * (1 + SIZE_RETRIES) * tasks + 4):
        sink.tick()
    assert producer.queue == []


def refused_for_good(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        line["task_id"]
        for line in logs
        if line["event"] == "htir_trace_not_stored" and line["log_level"] == "error"
    ]


def held(tasks: Sequence[Task], refused: set[str]) -> dict[int, int]:
    found: dict[int, int] = {}
    for task in tasks:
        if task.task_id in refused:
            first = task.first_offset
            found[task.partition] = min(first, found.get(task.partition, first))
    return found


class TestATraceSharingABatchWithAnOversizedOne:
    def test_fits_so_is_stored_and_the_oversized_one_is_refused_once(self) -> None:
        producer = FakeProducer()
        sink = feeder(producer)
        tasks, turns = stream([SMALL, BIG, SMALL], [0, 0, 1])
        with capture_logs() as logs:
            deliver(sink, turns)  # all three close in one batch, so are sent together
            settle(sink, producer, len(tasks))
        shared = producer.batches[0]
        assert len(shared) == 3
        assert sorted(producer.stored) == [b"task-0", b"task-2"]
        assert refused_for_good(logs) == ["task-1"]
        # Once with the others, then alone each time it went again.
        assert producer.produced("task-1") == 1 + SIZE_RETRIES
        for task in ("task-0", "task-2"):
            assert producer.produced(task) == 2  # its shared batch, then alone
        for batch in producer.batches[1:]:
            assert len(batch) == 1
        assert sink.held_offsets() == {0: tasks[1].first_offset}
        assert sink.published == 2
        sink.close()
        assert refused_for_good(logs) == ["task-1"]  # the shutdown says nothing more

    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(
            st.tuples(st.sampled_from([SMALL, BIG]), st.integers(0, 2)), min_size=1, max_size=6
        ),
        st.integers(0, 3),
    )
    def test_every_fitting_trace_is_stored_and_each_oversized_said_once(
        self, plan: list[tuple[int, int]], split: int
    ) -> None:
        """Whatever traces close together (one ``write_batch`` or two), and
        whichever shared a batch with an oversized one."""
        producer = FakeProducer()
        sink = feeder(producer)
        tasks, turns = stream([s for s, _ in plan], [p for _, p in plan])
        cut = min(split, len(tasks))
        cut_at = sum(t.steps for t in tasks[:cut])
        with capture_logs() as logs:
            for part in (turns[:cut_at], turns[cut_at:]):
                deliver(sink, part)
            settle(sink, producer, len(tasks))
        big = {t.task_id for t in tasks if t.steps == BIG}
        assert sorted(refused_for_good(logs)) == sorted(big)
        assert {k.decode() for k in producer.stored} == {t.task_id for t in tasks} - big
        assert len(producer.stored) == len(tasks) - len(big)  # each stored once
        for task_id in big:
            assert producer.produced(task_id) == 1 + SIZE_RETRIES
        assert sink.held_offsets() == held(tasks, big)


def scripted(scripts: dict[bytes, list[Outcome]]) -> Callable[[list[Sent]], list[Outcome]]:
    """Each trace's outcomes in turn, stored once its script is spent."""

    def outcome(batch: list[Sent]) -> list[Outcome]:
        found = []
        for sent in batch:
            assert sent.key is not None
            script = scripts[sent.key]
            found.append(script.pop(0) if script else Outcome.STORED)
        return found

    return outcome


def expected(script: Sequence[Outcome]) -> tuple[bool, int]:
    """The contract on one trace's outcomes: stored or not, and how often produced."""
    size_refusals = 0
    for produced, outcome in enumerate(script, start=1):
        if outcome is Outcome.STORED:
            return True, produced
        if outcome is Outcome.TOO_LARGE:
            if size_refusals == SIZE_RETRIES:
                return False, produced
            size_refusals += 1
    return True, len(script) + 1


OUTCOMES = st.lists(st.sampled_from(list(Outcome)), max_size=6)


class TestDeliveryOutcomes:
    def test_refused_as_too_large_once_then_taken_is_stored_and_not_refused(self) -> None:
        producer = FakeProducer(scripted({b"task-0": [Outcome.TOO_LARGE]}))
        sink = feeder(producer)
        tasks, turns = stream([SMALL], [0])
        with capture_logs() as logs:
            deliver(sink, turns)
            settle(sink, producer, len(tasks))
        assert producer.stored == [b"task-0"]
        assert refused_for_good(logs) == []
        retried = [line for line in logs if line["event"] == "htir_trace_not_stored"]
        assert [(r["log_level"], r["retried"], r["alone"]) for r in retried] == [
            ("warning", True, True)
        ]
        assert sink.published == 1
        published = [line for line in logs if line["event"] == "htir_traces_published"]
        assert [(p["traces"], p["first_task_id"], p["last_task_id"]) for p in published] == [
            (1, "task-0", "task-0")
        ]
        assert sink.held_offsets() == {}

    def test_refused_as_too_large_every_time_is_said_once_and_held(self) -> None:
        producer = FakeProducer(scripted({b"task-0": [Outcome.TOO_LARGE] * 50, b"task-1": []}))
        sink = feeder(producer)
        tasks, turns = stream([SMALL, SMALL], [1, 1])
        with capture_logs() as logs:
            deliver(sink, turns)
            settle(sink, producer, len(tasks))
            sink.close()
        assert refused_for_good(logs) == ["task-0"]
        assert producer.produced("task-0") == 1 + SIZE_RETRIES
        assert producer.stored == [b"task-1"]
        assert sink.held_offsets() == {1: tasks[0].first_offset}

    def test_a_transient_failure_is_produced_again_at_once_not_alone(self) -> None:
        producer = FakeProducer(scripted({b"task-0": [Outcome.TRANSIENT] * 5}))
        sink = feeder(producer)
        _, turns = stream([SMALL], [0])
        with capture_logs() as logs:
            deliver(sink, turns)
            for _ in range(5):
                sink.tick()
        assert producer.stored == [b"task-0"]
        assert producer.flushes == 0  # no flush around it: not sent alone
        retried = [line for line in logs if line["event"] == "htir_trace_not_stored"]
        assert len(retried) == 5
        assert all(r["log_level"] == "warning" and "alone" not in r for r in retried)
        assert refused_for_good(logs) == []

    def test_a_retry_waiting_at_shutdown_goes_alone_before_the_feeder_stops(self) -> None:
        producer = FakeProducer(scripted({b"task-0": [Outcome.TOO_LARGE]}))
        sink = feeder(producer)
        _, turns = stream([SMALL], [0])
        with capture_logs() as logs:
            deliver(sink, turns)  # refused once: its retry alone waits for the next poll
            sink.close()
        assert producer.stored == [b"task-0"]
        assert refused_for_good(logs) == []
        assert sink.held_offsets() == {}

    @settings(max_examples=80, deadline=None)
    @given(st.lists(OUTCOMES, min_size=1, max_size=4))
    def test_any_outcomes(self, scripts: list[list[Outcome]]) -> None:
        """Per trace, any sequence of outcomes: stored when one is taken before
        the size retries run out, else said once and held; never produced more
        than the contract allows, nothing produced on the polls after."""
        producer = FakeProducer(
            scripted({f"task-{n}".encode(): list(s) for n, s in enumerate(scripts)})
        )
        sink = feeder(producer)
        tasks, turns = stream([SMALL] * len(scripts), [n % 3 for n in range(len(scripts))])
        with capture_logs() as logs:
            deliver(sink, turns)
            settle(sink, producer, len(tasks))
            sink.close()
        refused = set()
        for task, script in zip(tasks, scripts, strict=True):
            stored, produced = expected(script)
            assert producer.produced(task.task_id) == produced, (task, script)
            assert (task.task_id.encode() in producer.stored) == stored
            if not stored:
                refused.add(task.task_id)
        assert sorted(refused_for_good(logs)) == sorted(refused)
        assert sink.held_offsets() == held(tasks, refused)
        assert sink.published == len(tasks) - len(refused)
