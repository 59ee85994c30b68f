"""Redeliveries across worker processes, marked.

A worker that dies after its sink had a batch but before its offsets were
committed leaves that batch to be read again by whoever owns the partition
next, a process that never saw it. ``RedeliveryMarkingSink`` records, after
each flush, the next offset the service's sinks were handed per partition
(``turnaudit_consumer_delivered_offset``, the maximum over every worker of
this run); a worker that picks a partition up below it marks those turns as
redelivered (``turnaudit_redelivered_turns_total``, not counted again by the
metrics sink, ``"redelivered": true`` in the log sink's lines). The mark is
set only after the sink returned, so a kill in between leaves a turn counted
twice, never not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import Gauge

from turnaudit._native import ConsumeStep
from turnaudit.consumers.runtime.multiprocess_files import merged
from turnaudit.consumers.runtime.sink import (
    ConsumedTurn,
    NativeTallies,
    Sink,
    StepOutlet,
    SteppingSink,
    StepRun,
    TallyingSink,
)
from turnaudit.records import Record

DELIVERED_OFFSET = "turnaudit_consumer_delivered_offset"


@dataclass(frozen=True, slots=True)
class _Redelivered:
    """The placement of a turn another worker of this run had already handed to its sink."""

    counts_as_turn: bool = False
    redelivered: bool = True


REDELIVERED = _Redelivered()


class RedeliveryMarkingSink(Sink):
    """A worker's sink: turns another worker already delivered are marked redelivered.

    For sinks of counted turns (``marks_redeliveries``).
    """

    def __init__(self, inner: Sink, topic: str, metrics_dir: str) -> None:
        if not inner.marks_redeliveries:
            raise ValueError("RedeliveryMarkingSink wraps sinks that take redelivery marks only")
        self._inner = inner
        self._topic = topic
        self._metrics_dir = metrics_dir
        self._delivered = Gauge(
            DELIVERED_OFFSET,
            "Next offset handed to a sink of this service, per partition (every worker's maximum).",
            ["topic", "partition"],
            registry=None,
            multiprocess_mode="max",
        )
        self._next: dict[int, int] = {}  # this worker's next offset per partition
        self._floor: dict[int, int] = {}  # the service's delivered offset when picked up
        self.on_marked: Callable[[int], None] = lambda _n: None
        # The batch in hand: next offset per partition, how many were marked.
        self._batch_next: dict[int, int] = {}
        self._marked = 0

    def take(self, turn: ConsumedTurn) -> None:
        partition, offset = turn.partition, turn.offset
        # Picked up where this worker had not just left off: another worker may have
        # delivered some of it already.
        self._picked_up(partition, offset)
        if offset < self._floor.get(partition, -1) and turn.sequence.counts_as_turn:
            turn = turn._replace(sequence=REDELIVERED)
            self._marked += 1
        self._inner.take(turn)

    def admits_native(self, records: Sequence[Record]) -> bool:
        """Whether no record of the batch lies under its partition's floor, so the native
        step may take its ordinary turns (none of them is to be marked); the batch's
        offsets are taken as handed either way (as ``take`` takes them)."""
        admitted = True
        for record in records:
            partition, offset = record.partition(), record.offset()
            if partition is None or offset is None:
                continue  # an error event: no position, not handed
            self._picked_up(partition, offset)
            if offset < self._floor.get(partition, -1):
                admitted = False
        return admitted

    def _picked_up(self, partition: int, offset: int) -> None:
        """The batch in hand reaches ``offset`` of ``partition``; picked up where this
        worker had not just left off, the service's delivered offset is its floor."""
        batch = self._batch_next
        if partition not in batch and self._next.get(partition) != offset:
            self._floor[partition] = self._service_delivered(partition)
        batch[partition] = max(batch.get(partition, 0), offset + 1)

    def flush(self) -> None:
        self._inner.flush()  # raising keeps the batch pending for the retry
        for partition, offset in self._batch_next.items():
            self._next[partition] = offset
            self._delivered.labels(self._topic, str(partition)).set(offset)
        marked = self._marked
        self._batch_next, self._marked = {}, 0
        if marked:
            self.on_marked(marked)

    def partitions_revoked(self, partitions: set[int]) -> None:
        """Partitions revoked or lost: whoever reads them next may go further."""
        for partition in partitions:
            self._next.pop(partition, None)
            self._floor.pop(partition, None)
        self._inner.partitions_revoked(partitions)

    def _service_delivered(self, partition: int) -> int:
        wanted = {"topic": self._topic, "partition": str(partition)}
        # A file another process is creating right now is left out (multiprocess_files).
        for family in merged(self._metrics_dir):
            if family.name == DELIVERED_OFFSET:
                for sample in family.samples:
                    if sample.labels == wanted:
                        return int(sample.value)
        return -1

    def tick(self) -> None:
        self._inner.tick()

    def held_offsets(self) -> Mapping[int, int] | None:
        return self._inner.held_offsets()

    def close(self) -> None:
        self._inner.close()


class TallyingMarkingSink(RedeliveryMarkingSink):
    """The marking sink of a sink that tallies its ordinary turns natively (the metrics
    service's under ``--workers``): a batch none of whose records lies under another
    worker's delivered offset is tallied natively (none of its turns is marked); any other
    batch goes record by record through ``take``, which marks."""

    def __init__(self, inner: Sink, topic: str, metrics_dir: str) -> None:
        if not isinstance(inner, TallyingSink):
            raise ValueError("TallyingMarkingSink wraps sinks that tally natively only")
        super().__init__(inner, topic, metrics_dir)
        self.native_tallies: Callable[[], NativeTallies] = inner.native_tallies


class SteppingMarkingSink(RedeliveryMarkingSink):
    """The marking sink of a sink the native step gives its ordinary turns its own way
    (the log sink's lines under ``--workers``), admitted per batch as
    ``TallyingMarkingSink``'s."""

    def __init__(self, inner: Sink, topic: str, metrics_dir: str) -> None:
        if not isinstance(inner, SteppingSink):
            raise ValueError("SteppingMarkingSink wraps sinks the native step serves only")
        super().__init__(inner, topic, metrics_dir)
        self._stepping = inner

    def step_outlet(self) -> StepOutlet:
        return self._stepping.step_outlet()

    def step_runner(self, step: ConsumeStep) -> StepRun | None:
        return self._stepping.step_runner(step)


def marking_sink(inner: Sink, topic: str, metrics_dir: str) -> RedeliveryMarkingSink:
    """The marking sink for ``inner``: one that keeps its native step where it has one."""
    if isinstance(inner, TallyingSink):
        return TallyingMarkingSink(inner, topic, metrics_dir)
    if isinstance(inner, SteppingSink):
        return SteppingMarkingSink(inner, topic, metrics_dir)
    return RedeliveryMarkingSink(inner, topic, metrics_dir)
