"""The block order, pure: generated partition contents fed by a fake broker that answers
in any order, pauses and refetches; checked against a reference model of the stated order."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.records import Record, StoredRecord
from turnaudit.replay import order
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.replay.order import BLOCK_MESSAGES, BlockOrder
from turnaudit.replay.run import prefix_state

TOPIC = "turn-events"
Position = tuple[int, int]


@dataclass
class Partition:
    """A partition's log (offsets, gaps allowed inside) and the range [start, end) replayed."""

    log: list[int]
    start: int
    end: int

    @property
    def in_range(self) -> list[int]:
        return [o for o in self.log if self.start <= o < self.end]


@st.composite
def partitions(
    draw: st.DrawFn,
    max_partitions: int = 4,
    max_records: int = 40,
) -> dict[int, Partition]:
    """Up to ``max_partitions`` partitions (ids not necessarily contiguous); each log has
    records before and after its range, and the range's last offset is a record."""
    ids = draw(st.lists(st.integers(0, 9), min_size=1, max_size=max_partitions, unique=True))
    found = {}
    for p in ids:
        log_start = draw(st.integers(0, 50))
        length = draw(st.integers(0, max_records))
        gaps = draw(st.sets(st.integers(0, max(length - 2, 0)), max_size=length // 4))
        log = [log_start + i for i in range(length) if i not in gaps]
        if not log:
            found[p] = Partition([], log_start, log_start)
            continue
        first = draw(st.integers(0, len(log) - 1))
        last = draw(st.integers(first, len(log) - 1))
        # An empty range now and then: start == end.
        empty = draw(st.booleans()) and draw(st.booleans())
        start = log[first]
        end = start if empty else log[last] + 1
        found[p] = Partition(log, start, end)
    return found


def reference(contents: dict[int, Partition], block: int) -> list[Position]:
    """The stated order, written plainly: rounds over the partitions in ascending order,
    each giving its next ``block`` records; a partition whose range has ended drops out."""
    queues = {p: list(contents[p].in_range) for p in sorted(contents)}
    ordered: list[Position] = []
    while any(queues.values()):
        for p, queue in queues.items():
            ordered += [(p, o) for o in queue[:block]]
            del queue[:block]
    return ordered


def new_state(contents: dict[int, Partition]) -> ReplayCheckpoint:
    start = {p: c.start for p, c in contents.items()}
    end = {p: c.end for p, c in contents.items()}
    return ReplayCheckpoint("f" * 64, TOPIC, start, end, dict(start), 0, 0, 0)


@dataclass
class FakeBroker:
    """Serves assigned partitions from their logs in random chunks, in any partition order;
    a paused partition serves nothing; now and then a record is served again (a refetch
    after a pause) or a record beyond the range's bound arrives."""

    contents: dict[int, Partition]
    rnd: random.Random
    position: dict[int, int] = field(default_factory=dict)  # index into the log
    paused: set[int] = field(default_factory=set)

    def assign(self, starts: dict[int, int]) -> None:
        for p, offset in starts.items():
            log = self.contents[p].log
            self.position[p] = next((i for i, o in enumerate(log) if o >= offset), len(log))

    def consume(self) -> list[Record]:
        got: list[Record] = []
        serving = [p for p in self.position if p not in self.paused]
        for p in self.rnd.sample(serving, k=self.rnd.randint(0, len(serving))):
            log, at = self.contents[p].log, self.position[p]
            if at > 0 and self.rnd.random() < 0.2:
                at = self.rnd.randint(max(0, at - 5), at)  # served again
            step = self.rnd.randint(1, 12)
            got += [StoredRecord(TOPIC, p, o) for o in log[at : at + step]]
            self.position[p] = max(self.position[p], min(at + step, len(log)))
        # Partitions interleave as they arrive; each partition's records in offset order.
        arrival = [r.partition() or 0 for r in got]
        self.rnd.shuffle(arrival)
        served = {p: iter([r for r in got if r.partition() == p]) for p in set(arrival)}
        return [next(served[p]) for p in arrival]


def run(
    state: ReplayCheckpoint,
    contents: dict[int, Partition],
    rnd: random.Random,
    block: int,
    *,
    batches: list[int] | None = None,
    snapshots: list[tuple[int, str]] | None = None,
) -> list[Position]:
    """What the reader does, with a fake broker: emit, else apply the pauses and fetch.
    ``snapshots`` gets (records emitted so far, checkpoint JSON) after every batch."""
    blocks = BlockOrder(state, block)
    broker = FakeBroker(contents, rnd)
    broker.assign(blocks.starts)
    emitted: list[Position] = []
    idle = 0
    while blocks.active:
        batch = blocks.emit(rnd.choice(batches or [1, 3, 7, 50]))
        if batch:
            emitted += [(r.partition() or 0, r.offset() or 0) for r in batch]
            if snapshots is not None:
                snapshots.append((len(emitted), json.dumps(state.as_json())))
            idle = 0
            continue
        stop, go = blocks.flow()
        broker.paused.update(stop)
        broker.paused.difference_update(go)
        assert blocks.waiting not in broker.paused  # whose turn it is always fetches
        for record in broker.consume():
            blocks.offer(record)
        idle += 1
        assert idle < 10_000, "the order waits for a record that never comes"
    return emitted


@settings(max_examples=150, deadline=None)
@given(partitions(), st.integers(1, 6), st.randoms(use_true_random=False))
def test_every_record_once_in_the_stated_block_order(
    contents: dict[int, Partition], block: int, rnd: random.Random
) -> None:
    state = new_state(contents)
    emitted = run(state, contents, rnd, block)
    assert emitted == reference(contents, block)
    assert state.next == {p: c.end if c.in_range else c.start for p, c in contents.items()}


@settings(max_examples=100, deadline=None)
@given(
    partitions(),
    st.integers(1, 6),
    st.integers(1, 3),
    st.integers(1, 4),
    st.randoms(use_true_random=False),
)
def test_the_order_holds_whatever_the_buffer_budget_pauses(
    contents: dict[int, Partition], block: int, budget: int, floor: int, rnd: random.Random
) -> None:
    with (
        mock.patch.object(order, "_BUFFER_BUDGET", budget),
        mock.patch.object(order, "_BUFFER_FLOOR", floor),
    ):
        emitted = run(new_state(contents), contents, rnd, block)
    assert emitted == reference(contents, block)


@settings(max_examples=150, deadline=None)
@given(partitions(), st.integers(1, 6), st.randoms(use_true_random=False), st.data())
def test_resuming_any_saved_checkpoint_gives_the_same_remaining_order(
    contents: dict[int, Partition], block: int, rnd: random.Random, data: st.DataObject
) -> None:
    snapshots: list[tuple[int, str]] = []
    whole = run(new_state(contents), contents, rnd, block, snapshots=snapshots)
    if not snapshots:
        return
    done, saved = data.draw(st.sampled_from(snapshots))
    resumed_state = ReplayCheckpoint.from_json(json.loads(saved))
    rest = run(resumed_state, contents, rnd, block)
    assert whole[:done] + rest == whole
    # The already-written prefix (what a warmed output is fed again) is the block order
    # of the range cut at the checkpoint's offsets.
    prefix = run(prefix_state(ReplayCheckpoint.from_json(json.loads(saved))), contents, rnd, block)
    assert prefix == whole[:done]


@settings(max_examples=15, deadline=None)
@given(
    partitions(max_partitions=3, max_records=2_600), st.randoms(use_true_random=False), st.data()
)
def test_blocks_of_block_messages_and_a_resume(
    contents: dict[int, Partition], rnd: random.Random, data: st.DataObject
) -> None:
    snapshots: list[tuple[int, str]] = []
    whole = run(
        new_state(contents),
        contents,
        rnd,
        BLOCK_MESSAGES,
        batches=[1, 500, 999, 1000, 4000],
        snapshots=snapshots,
    )
    assert whole == reference(contents, BLOCK_MESSAGES)
    if snapshots:
        done, saved = data.draw(st.sampled_from(snapshots))
        rest = run(
            ReplayCheckpoint.from_json(json.loads(saved)),
            contents,
            rnd,
            BLOCK_MESSAGES,
            batches=[1, 500, 999, 1000, 4000],
        )
        assert whole[:done] + rest == whole


def test_three_partitions_interleave_in_blocks() -> None:
    contents = {p: Partition(list(range(20)), 0, 20) for p in (0, 1, 2)}
    emitted = run(new_state(contents), contents, random.Random(7), 7)
    assert [p for p, _ in emitted[:22]] == [0] * 7 + [1] * 7 + [2] * 7 + [0]
    assert emitted == reference(contents, 7)


def test_the_state_names_the_place_in_the_block_order() -> None:
    contents = {0: Partition(list(range(10)), 0, 10), 1: Partition(list(range(10)), 0, 10)}
    state = new_state(contents)
    blocks = BlockOrder(state, 4)
    for p in (0, 1):
        for o in range(10):
            blocks.offer(StoredRecord(TOPIC, p, o))
    assert [(r.partition(), r.offset()) for r in blocks.emit(6)] == (
        [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    )
    assert (state.cursor, state.taken, state.next) == (1, 2, {0: 4, 1: 2})


def test_a_finished_or_foreign_cursor_starts_the_round_at_the_first_partition() -> None:
    contents = {0: Partition(list(range(3)), 0, 3), 1: Partition(list(range(3)), 0, 3)}
    state = new_state(contents)
    state.next, state.cursor, state.taken = {0: 3, 1: 1}, 0, 2  # partition 0 is done
    blocks = BlockOrder(state, 2)
    assert state.taken == 0
    assert blocks.active == [1]
    assert blocks.starts == {1: 1}
