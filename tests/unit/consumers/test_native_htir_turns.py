"""The HTIR feeder's native hand-over against the record-by-record path.

``TurnEventValidation.examine_batch`` with the feeder's sink (ordinary turns through
``ConsumeStep``'s turn outlet: one with a task handed over as a ``ConsumedTurn`` decoded
natively, one without counted only; every other message through ``examine``/``conclude``
and ``take``) publishes the same traces, byte for byte and in the same order, as
``hand_over`` record by record, over any batches of the native batch test's kinds (every
shipped version, a learned schema, garbage, wrong keys, duplicates, gaps, chain breaks,
breaches, recorded breaches, redriven headers, forgotten partitions), with the same
``HandedBatch``, rejections, registry samples, held offsets, open traces and tracker
state.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from prometheus_client import CollectorRegistry

from tests.unit.consumers.test_htir_feeder_refusals import SETTINGS, FakeProducer, Outcome, Sent
from tests.unit.consumers.test_native_batch import (
    CATALOG,
    Message,
    batches,
    chained_turns,
    learned,
    tracker_state,
)
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.runtime import ConsumedTurn, Rejection, TurnEventValidation
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.handover import HandedBatch, hand_over
from turnaudit.records import Record
from turnaudit.serialization.wire import TurnEventDeserializer


def stored(batch: list[Sent]) -> list[Outcome]:
    return [Outcome.STORED] * len(batch)


class FeederService:
    """One feeder's validation and sink, producing into a fake of its own."""

    def __init__(self, native: bool) -> None:
        self.native = native
        self.registry = CollectorRegistry()
        self.rejections: list[tuple[int, int, str, str]] = []
        decode = TurnEventDeserializer(CATALOG, resolver=learned)
        self.validation = TurnEventValidation(
            decode, ConsumerMetrics(self.registry), max_sessions=1000
        )
        self.producer = FakeProducer(outcome=stored)
        self.sink = HtirFeederSink(
            SETTINGS, registry=self.registry, idle_timeout=3600, producer=self.producer
        )
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
        if handed.handed:  # as the runtime flushes
            self.sink.flush()
        self.sink.tick()
        return handed

    def traces(self) -> list[tuple[bytes | None, bytes | None]]:
        return [(sent.key, sent.value) for batch in self.producer.batches for sent in batch]

    def samples(self) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for metric in self.registry.collect()
            for s in metric.samples
            if not s.name.endswith("_created")
        )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_native_feeder_publishes_the_record_by_record_traces(
    drawn: tuple[list[list[Message]], list[set[int]]],
) -> None:
    cut, forgotten = drawn
    reference, native = FeederService(False), FeederService(True)
    for records, forget in zip(cut, forgotten, strict=True):
        assert native.batch(records) == reference.batch(records)
        assert native.rejections == reference.rejections
        assert native.traces() == reference.traces()
        assert native.sink.held_offsets() == reference.sink.held_offsets()
        assert native.sink.open_traces == reference.sink.open_traces
        for service in (reference, native):
            service.validation.forget_partitions(forget)
            service.sink.partitions_revoked(forget)
    assert native.samples() == reference.samples()
    assert tracker_state(native) == tracker_state(reference)


def test_ordinary_turns_reach_the_feeder_without_take_those_with_a_task_decoded() -> None:
    turns = chained_turns(7, 60, [3, 4, 5] * 20)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    reference, native = FeederService(False), FeederService(True)
    assert native.batch(records) == HandedBatch(next_offsets={0: 60}, handed=60)
    assert reference.batch(records) == HandedBatch(next_offsets={0: 60}, handed=60)
    assert native.taken == []
    with_task = [turn for turn in reference.taken if turn.event["task"] is not None]
    assert 0 < len(with_task) < 60  # both kinds were in the batch
    assert native.traces() == reference.traces()
    assert native.traces()  # a trace closed
    assert native.sink.held_offsets() == reference.sink.held_offsets()
