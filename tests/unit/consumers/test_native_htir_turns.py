"""The HTIR feeder's native hand-over against the record-by-record path.

``TurnEventValidation.examine_batch`` with the feeder's sink (ordinary turns through
``ConsumeStep``'s traces outlet: one with a task made into its trace steps natively from
the scanned record under the feeder's surface policy and added to its trace in the store,
one without counted only; every other message through ``examine``/``conclude`` and ``take``)
publishes the same traces, byte for byte and in the same order, and writes the same
manifest lines, as ``hand_over`` record by record, under every surface policy, over any
batches of the native batch test's kinds (every shipped version, a learned schema,
garbage, wrong keys, duplicates, gaps, chain breaks, breaches, recorded breaches,
redriven headers, forgotten partitions), with the same ``HandedBatch``, rejections,
registry samples, held offsets, open traces and tracker state.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.consumers.test_htir_feeder_refusals import SETTINGS, FakeProducer, Outcome, Sent
from tests.unit.consumers.test_native_batch import (
    Message,
    ServiceUnderTest,
    batches,
    chained_turns,
    tracker_state,
)
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.runtime.handover import HandedBatch
from turnaudit.redaction import DROPPED, Redaction, SurfacePolicy

POLICIES = st.sampled_from(
    [DROPPED, Redaction.keep(), Redaction(SurfacePolicy.HASH, b"a surface key")]
)


def stored(batch: list[Sent]) -> list[Outcome]:
    return [Outcome.STORED] * len(batch)


class FeederService(ServiceUnderTest):
    """One feeder's validation and sink, producing into a fake of its own."""

    sink: HtirFeederSink

    def __init__(
        self, native: bool, redaction: Redaction = DROPPED, manifest: Path | None = None
    ) -> None:
        self.producer = FakeProducer(outcome=stored)
        self.manifest = manifest
        super().__init__(
            native,
            lambda registry: HtirFeederSink(
                SETTINGS,
                registry=registry,
                idle_timeout=3600,
                producer=self.producer,
                redaction=redaction,
                manifest=manifest,
            ),
        )

    def after_batch(self, handed: HandedBatch) -> None:
        if handed.handed:  # as the runtime flushes
            self.sink.flush()
        self.sink.tick()

    def traces(self) -> list[tuple[bytes | None, bytes | None]]:
        return [(sent.key, sent.value) for batch in self.producer.batches for sent in batch]

    def manifest_lines(self) -> list[str]:
        assert self.manifest is not None
        return self.manifest.read_text(encoding="utf-8").splitlines()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), POLICIES)
def test_the_native_feeder_publishes_the_record_by_record_traces_and_manifest(
    drawn: tuple[list[list[Message]], list[set[int]]], redaction: Redaction
) -> None:
    cut, forgotten = drawn
    with tempfile.TemporaryDirectory() as tmp:
        reference = FeederService(False, redaction, Path(tmp) / "reference.jsonl")
        native = FeederService(True, redaction, Path(tmp) / "native.jsonl")
        check_batches(reference, native, cut, forgotten)


def held_by_first_offsets(sink: HtirFeederSink) -> dict[int, int]:
    """The held offsets as a minimum over every held trace: per partition, the least first
    offset of a trace open (the store's) or closed and not yet acknowledged (the feeder's)."""
    held: dict[int, int] = {}
    reads = [(p, o) for _, p, o in sink._store.first_reads()]
    reads += [(p, o) for p, closed in sink._held.items() for o in closed.values()]
    for partition, offset in reads:
        held[partition] = min(offset, held.get(partition, offset))
    return held


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), POLICIES, st.data())
def test_the_held_offsets_are_each_partitions_least_first_offset_of_a_held_trace(
    drawn: tuple[list[list[Message]], list[set[int]]], redaction: Redaction, data: st.DataObject
) -> None:
    # Traces stored or refused for a while (a transient failure, produced again) at random,
    # partitions revoked between batches: the per-partition bookkeeping says what the
    # minimum over every held trace says.
    cut, forgotten = drawn
    for native in (False, True):
        service = FeederService(native, redaction)
        service.producer.outcome = lambda batch: [
            data.draw(st.sampled_from([Outcome.STORED, Outcome.TRANSIENT])) for _ in batch
        ]
        for records, forget in zip(cut, forgotten, strict=True):
            service.batch(records)
            assert service.sink.held_offsets() == held_by_first_offsets(service.sink)
            service.validation.forget_partitions(forget)
            service.sink.partitions_revoked(forget)
            assert service.sink.held_offsets() == held_by_first_offsets(service.sink)


def check_batches(
    reference: FeederService,
    native: FeederService,
    cut: list[list[Message]],
    forgotten: list[set[int]],
) -> None:
    for records, forget in zip(cut, forgotten, strict=True):
        assert native.batch(records) == reference.batch(records)
        assert native.rejections == reference.rejections
        assert native.traces() == reference.traces()
        assert native.manifest_lines() == reference.manifest_lines()
        assert native.sink.held_offsets() == reference.sink.held_offsets()
        assert native.sink.open_traces == reference.sink.open_traces
        for service in (reference, native):
            service.validation.forget_partitions(forget)
            service.sink.partitions_revoked(forget)
    assert native.samples() == reference.samples()
    assert tracker_state(native) == tracker_state(reference)


def test_ordinary_turns_reach_the_feeders_traces_without_take_or_a_python_turn() -> None:
    turns = chained_turns(7, 60, [3, 4, 5] * 20)
    records = [Message(v, k, 0, i) for i, (k, v) in enumerate(turns)]
    reference, native = FeederService(False), FeederService(True)
    handed: list[object] = []
    write_batch = native.sink.write_batch

    def seen(batch: list[object]) -> None:
        handed.extend(batch)
        write_batch(batch)  # type: ignore[arg-type]  # the turns as handed

    native.sink.write_batch = seen  # type: ignore[method-assign,assignment]  # watched
    assert native.batch(records) == HandedBatch(next_offsets={0: 60}, handed=60)
    assert reference.batch(records) == HandedBatch(next_offsets={0: 60}, handed=60)
    assert native.taken == []
    assert handed == []  # the native step added the task turns to the store itself
    with_task = [turn for turn in reference.taken if turn.event["task"] is not None]
    assert 0 < len(with_task) < 60  # both kinds were in the batch
    assert native.traces() == reference.traces()
    assert native.traces()  # a trace closed
    assert native.sink._store.first_reads() == reference.sink._store.first_reads()
    assert native.sink._store.first_reads()  # and one is still open
    assert native.sink.held_offsets() == reference.sink.held_offsets()
