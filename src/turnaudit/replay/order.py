"""The block order of a replay, pure: which buffered record comes next.

Each partition by offset; partitions in ascending order, interleaved in blocks
of :data:`BLOCK_MESSAGES` records (partition 0's first block, partition 1's
first block, …, then every partition's second block; a partition whose range
has ended drops out). The order depends on the range only, never on which
partition the broker answered first: records that arrive ahead of their turn
are buffered, and a partition holding its share of :data:`_BUFFER_BUDGET`
(at least :data:`_BUFFER_FLOOR`) is to be paused.

:class:`BlockOrder` does the bookkeeping on an :class:`OrderState` (a
``ReplayCheckpoint``): ``next`` per partition, ``cursor`` (the partition whose
block is being handed out) and ``taken`` (how many of that block's records are
handed out). The state at any batch boundary resumes the same order. Nothing
here talks to Kafka: the reader (``turnaudit.replay.reader``) offers what it
fetched and applies the pauses.
"""

from __future__ import annotations

from typing import Protocol

from turnaudit.records import Record

# Records a partition contributes before the next partition's turn; part of
# the stated order (and of the checkpoint), independent of the batch size.
BLOCK_MESSAGES = 1000
ORDER = (
    f"each partition by offset; partitions in ascending order, interleaved in blocks of "
    f"{BLOCK_MESSAGES} messages"
)
# Records buffered ahead across all partitions: a partition holding its share
# (at least two blocks) pauses its fetching, so memory does not grow with the
# partition count (64 partitions at 20,000 each would hold 1.3 M messages).
_BUFFER_BUDGET = 60_000
_BUFFER_FLOOR = 2 * BLOCK_MESSAGES


class OrderState(Protocol):
    """The place in the block order, as a checkpoint records it."""

    end: dict[int, int]  # per partition: the bound (exclusive)
    next: dict[int, int]  # per partition: the next offset to hand out
    cursor: int | None  # the partition whose block is being handed out
    taken: int  # records of that block handed out


class BlockOrder:
    """The block order over the records offered to it; advances ``state`` as it hands
    them out. ``block``: records per block (default :data:`BLOCK_MESSAGES`)."""

    def __init__(self, state: OrderState, block: int | None = None) -> None:
        self._state = state
        self._block = BLOCK_MESSAGES if block is None else block
        self._active = [p for p in sorted(state.end) if state.next[p] < state.end[p]]
        self._at = self._active.index(state.cursor) if state.cursor in self._active else 0
        if state.cursor not in self._active:
            state.taken = 0
        # Per partition the buffered records and the index of the first not yet handed
        # out: a block leaves as one slice, not record by record.
        self._buffers: dict[int, list[Record]] = {p: [] for p in self._active}
        self._heads = dict.fromkeys(self._active, 0)
        self._fetched = {p: state.next[p] for p in self._active}
        self._paused: set[int] = set()

    @property
    def active(self) -> list[int]:
        """The partitions whose range is unfinished, in ascending order."""
        return self._active

    @property
    def starts(self) -> dict[int, int]:
        """Where each unfinished partition is to be read from."""
        return {p: self._state.next[p] for p in self._active}

    @property
    def waiting(self) -> int:
        """The partition whose turn it is (only while some partition is unfinished)."""
        return self._active[self._at]

    def fetched(self, partition: int) -> int:
        """The offset the next record of ``partition`` to be offered must reach."""
        return self._fetched[partition]

    def forget_pauses(self) -> list[int]:
        """The partitions paused so far, now counted as fetching (a new assignment
        resets what the consumer pauses); the next ``flow`` pauses again what is full."""
        paused = sorted(self._paused)
        self._paused.clear()
        return paused

    def offer(self, record: Record) -> None:
        """Buffer a fetched record; one of another partition, one already buffered (a
        refetch after a pause) or one beyond the bound is dropped."""
        where, offset = record.partition(), record.offset()
        if where is None or offset is None or where not in self._fetched:
            return
        if offset < self._fetched[where] or offset >= self._state.end[where]:
            return
        self._fetched[where] = offset + 1
        self._buffers[where].append(record)

    def emit(self, batch_size: int) -> list[Record]:
        """Up to ``batch_size`` buffered records in the block order; fewer when the
        partition whose turn it is has nothing buffered."""
        state, active, block = self._state, self._active, self._block
        batch: list[Record] = []
        while active and len(batch) < batch_size:
            p = state.cursor = active[self._at]
            buffer, head = self._buffers[p], self._heads[p]
            # Buffered records are below the bound (see offer): taking the one just
            # below it ends the partition.
            take = min(len(buffer) - head, block - state.taken, batch_size - len(batch))
            if take > 0:
                batch += buffer[head : head + take]
                head += take
                state.taken += take
                state.next[p] = int(buffer[head - 1].offset() or 0) + 1
                if head * 2 >= len(buffer):  # drop what was handed out
                    del buffer[:head]
                    head = 0
                self._heads[p] = head
            if state.next[p] >= state.end[p]:  # the partition's range is done
                active.pop(self._at)
            elif state.taken >= block:
                self._at += 1
            else:
                break  # the batch is full, or waiting for this partition's next records
            state.taken = 0
            if active:
                self._at %= len(active)
                state.cursor = active[self._at]
        return batch

    def flow(self) -> tuple[list[int], list[int]]:
        """The partitions to pause (buffer full) and to resume (drained, or whose turn
        it is); the partition whose turn it is is never paused."""
        paused, active = self._paused, self._active
        waiting = self.waiting
        limit = max(_BUFFER_FLOOR, _BUFFER_BUDGET // len(active))
        held = {p: len(self._buffers[p]) - self._heads[p] for p in active}
        stop = [p for p in active if p != waiting and p not in paused and held[p] >= limit]
        go = [p for p in sorted(paused) if p in active and (p == waiting or held[p] < limit // 2)]
        paused.update(stop)
        paused.difference_update(go)
        return stop, go
