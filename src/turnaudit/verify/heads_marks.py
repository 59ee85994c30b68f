"""Where ``verify --follow``'s heads judge has judged stream-heads to, per turn partition, and
the streams it retires once that is written. Pure: no I/O.

The judge reads ``<prefix>stream-heads`` from its beginning at every pass; an end
announcement it judged before (counted, or a stream retired) must not be judged again, or a
retired stream (gone from the state engine) would count as lost whole. The marks say, per
turn partition held since a pass began, the stream-heads offsets below which every end
announcement of that partition was judged (the reader's position, held back by the first
announcement still waiting); they are checkpointed (``heads:judged-to:<p>``) and loaded back
with the judge's other records. A stream that ended whole is retired only once a mark
covering its announcement has been written (``take_ready``): a crash between the two never leaves
a retired stream whose announcement would be judged again.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Mapping

from turnaudit.identity import StreamId

JUDGED_TO_KEY = "heads:judged-to:"
HeadsAt = tuple[int, int]  # an announcement's stream-heads partition and offset


class JudgedMarks:
    """The judged-to marks and the streams waiting to be retired; see the module docstring."""

    def __init__(self) -> None:
        self._read_to: dict[int, int] = {}  # stream-heads, read to in this pass
        self._judged_to: dict[int, dict[int, int]] = {}  # turn partition -> heads offsets
        self._written: dict[int, dict[int, int]] = {}  # as last checkpointed
        self._moved: set[int] = set()
        # (partition, heads partition) -> (offset, stream) of streams to retire: a follower
        # catching up holds many above the first waiting announcement, so each flush looks
        # only at the heads of these heaps
        self._retiring: dict[tuple[int, int], list[tuple[int, StreamId]]] = {}
        # (partition, heads partition) -> (offset, stream) of announcements that waited; an
        # entry no longer waiting is dropped when it reaches the top
        self._waiting: dict[tuple[int, int], list[tuple[int, StreamId]]] = {}

    def new_pass(self) -> None:
        self._read_to = {}

    def read_to(self, at: HeadsAt) -> None:
        """A record of stream-heads read (an announcement or not)."""
        self._read_to[at[0]] = max(self._read_to.get(at[0], 0), at[1] + 1)

    def judged(self, partition: int, at: HeadsAt | None) -> bool:
        """Whether an end announcement of ``partition`` read at ``at`` was judged before."""
        return at is not None and at[1] < self._judged_to.get(partition, {}).get(at[0], 0)

    def wait(self, stream: StreamId, partition: int, at: HeadsAt | None) -> None:
        """An end announcement waits for the proof: the marks stay below it."""
        if at is not None:
            heapq.heappush(self._waiting.setdefault((partition, at[0]), []), (at[1], stream))

    def retire_later(self, stream: StreamId, partition: int, at: HeadsAt | None) -> None:
        if at is not None:  # else nothing would pass over its announcement when read again
            heapq.heappush(self._retiring.setdefault((partition, at[0]), []), (at[1], stream))

    def forget(self, held: set[int]) -> None:
        """Partitions no longer held: their streams are the new owner's to retire."""
        for key in [k for k in self._retiring if k[0] not in held]:
            del self._retiring[key]
        for key in [k for k in self._waiting if k[0] not in held]:
            del self._waiting[key]

    def move(
        self, covering: set[int], still_waiting: Callable[[StreamId, int, HeadsAt], bool]
    ) -> None:
        """Per partition held since the pass began (``covering``): every announcement read
        before the first one still waiting, or the reader's position, is judged."""
        for partition in covering:
            known = self._judged_to.setdefault(partition, {})
            for heads_partition, read in self._read_to.items():
                to = min(read, self._first_waiting(partition, heads_partition, still_waiting))
                if to > known.get(heads_partition, 0):
                    known[heads_partition] = to
                    self._moved.add(partition)

    def _first_waiting(
        self,
        partition: int,
        heads_partition: int,
        still_waiting: Callable[[StreamId, int, HeadsAt], bool],
    ) -> int:
        heap = self._waiting.get((partition, heads_partition))
        while heap:
            offset, stream = heap[0]
            if still_waiting(stream, partition, (heads_partition, offset)):
                return offset
            heapq.heappop(heap)
        return 1 << 62

    def pending(self) -> bool:
        """Streams wait to be retired (a checkpoint writes the marks that let them go)."""
        return any(self._retiring.values())

    def take_ready(self) -> list[StreamId]:
        """Streams whose announcement a mark already written passes over."""
        ready = []
        for (partition, heads_partition), heap in self._retiring.items():
            written = self._written.get(partition, {}).get(heads_partition, 0)
            while heap and heap[0][0] < written:
                ready.append(heapq.heappop(heap)[1])
        return ready

    def moved(self) -> bool:
        return bool(self._moved)

    def load(self, key: str, value: bytes) -> bool:
        """A ``heads:judged-to:`` record (written, so durable); False: another key."""
        if not key.startswith(JUDGED_TO_KEY):
            return False
        partition = int(key[len(JUDGED_TO_KEY) :])
        offsets: Mapping[str, int] = json.loads(value)
        for name, offset in offsets.items():
            for table in (self._judged_to, self._written):
                marks = table.setdefault(partition, {})
                marks[int(name)] = max(int(offset), marks.get(int(name), 0))
        return True

    def checkpoint(self) -> list[tuple[bytes, bytes | None]]:
        records: list[tuple[bytes, bytes | None]] = []
        for partition in sorted(self._moved):
            marks = self._judged_to[partition]
            self._written[partition] = dict(marks)
            value = {str(hp): offset for hp, offset in sorted(marks.items())}
            records.append(((JUDGED_TO_KEY + str(partition)).encode(), json.dumps(value).encode()))
        self._moved.clear()
        return records
