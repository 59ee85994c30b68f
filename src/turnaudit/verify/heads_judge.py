"""``verify --follow``'s judgement of announced stream ends, live. Pure: no I/O, no thread.

One-shot ``verify`` measures a crash to the turn from ``<prefix>stream-heads``
(``turnaudit.verify.crash``); this is the same rule for a follower that reads the turns and
the announcements as they arrive, holding in memory only what waits for judgement:

* a ``cut`` or ``ended`` announcement of a stream this member proves: turns lost in a crash
  = announced head - the stream's last proved position (0 when the stream reached it),
  judged only once the member has proved its partition up to where the turn topic stood
  when the announcement was read (``need``), so a follower that lags counts no turn that is
  merely not read yet; a stream no turn of which was proved counts whole only while its
  partition still holds every offset from 0 (as one-shot's ``whole_stream``);
* an ``open`` announcement of a producer that has **vanished** (``Liveness.vanished``: silent
  past the bound without its closing note): the stream is at risk, its turns lost = its
  last announced head - last proved position, judged the same way. A producer's open
  streams are not held while it lives (a long-lived runtime announces every session it
  ever had): once one is judged vanished the reader passes over the compacted topic again
  (``wants_pass``) and this judge collects that producer's open streams. A producer that
  announces again has come back (its at-risk streams are dropped); one whose streams get a
  final announcement was taken over (a successor on its spool folder, or its own close).

A stream that ended whole (its final head proved, nothing counted lost) is **retired**: it
leaves the state engine (``EngineView.retire``; a tombstone in the state topic), once the
marks of where the judge has judged stream-heads to cover its announcement
(``turnaudit.verify.heads_marks``), so a pass that reads it again passes over it.

What was counted is kept per stream as the position counted to (``to``; streams counted
cut are marked), and per vanished producer the liveness it was counted on: checkpointed
(``checkpoint``, keys ``heads:…`` in the follower's state topic) and loaded back at each
pass, so nothing is counted twice after a restart or a rebalance, and a stream counted as
vanished then cut by a successor is counted to its cut head, not again.

The state engine is asked through ``EngineView`` (callables), never read directly.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from turnaudit.identity import LEGACY_PRODUCER, StreamId
from turnaudit.stream_heads import HeadAnnouncement, HeadStatus, Liveness
from turnaudit.verify.heads_marks import HeadsAt, JudgedMarks

LossCause = Literal["crash", "vanished"]
JUDGED_STREAM_KEY = "heads:stream:"
JUDGED_PRODUCER_KEY = "heads:producer:"


@dataclass(frozen=True)
class EngineView:
    """What the judge asks the follower's state engine, always on the loop's thread."""

    last_position: Callable[[StreamId], int | None]  # highest position proved; None: none
    partition_of: Callable[[StreamId], int | None]  # where its turns were read; None: unseen
    proved_offset: Callable[[int], int | None]  # None: not this member's (or not loaded yet)
    # A stream that ended whole leaves the engine; False: kept (an open gap, or not held).
    retire: Callable[[StreamId], bool] = lambda _stream: False
    # (partition_of, last_position) of a stream in one ask, where the engine has it (the
    # judge asks both of each announcement); None: the two asked one after the other.
    head: Callable[[StreamId], tuple[int | None, int | None]] | None = None

    def head_of(self, stream: StreamId) -> tuple[int | None, int | None]:
        """The stream's (partition it was read from, highest position proved)."""
        if self.head is not None:
            return self.head(stream)
        return self.partition_of(stream), self.last_position(stream)


@dataclass(frozen=True, slots=True)
class StreamLoss:
    """One stream judged: turns lost (maybe 0 for a cut stream, which is counted as cut)."""

    cause: LossCause
    status: HeadStatus
    stream: StreamId
    partition: int
    announced: int
    last: int | None
    lost: int
    cut: bool  # counted as a cut stream now (never again)
    pack: str
    runtime: str


@dataclass(frozen=True, slots=True)
class Vanishing:
    """A producer judged vanished with open streams (counted once per liveness record)."""

    producer: str
    silent_ms: int
    interval_ms: int
    open_streams: int


@dataclass(slots=True)
class _Waiting:
    """An announcement held until its partition is proved to ``need``."""

    note: HeadAnnouncement
    partition: int
    need: int  # the partition's high watermark, taken after the announcement was read
    whole: bool  # the partition held every offset from 0 then (its log start was 0)
    judged: bool = False
    at: HeadsAt | None = None  # where it was read in stream-heads


@dataclass(slots=True)
class _Judged:
    to: int  # the stream's positions up to here are counted (present or lost)
    cut: bool  # counted as a cut stream


def judged_stream_key(stream: StreamId) -> bytes:
    return (JUDGED_STREAM_KEY + json.dumps(list(stream))).encode()


class HeadsJudge:
    """Announcements and liveness in, stream losses out; see the module docstring."""

    def __init__(self, engine: EngineView, key_partition: Callable[[str, int], int]) -> None:
        self._engine = engine
        self._key_partition = key_partition  # (session id, partition count) -> partition
        self.liveness: dict[str, Liveness] = {}
        self._vanished: dict[str, int] = {}  # producer -> at_ms of the liveness judged on
        self._uncollected: set[str] = set()  # vanished since the current pass began
        self._collecting: set[str] = set()
        self._collected: set[str] = set()  # vanished, open streams collected by a pass
        self._at_risk: dict[str, dict[StreamId, _Waiting]] = {}
        self._ends: dict[StreamId, _Waiting] = {}  # cut/ended, this member's, waiting
        self._heaps: dict[int, list[tuple[int, int, StreamId, str | None]]] = {}
        self._pushed = 0
        self._judged: dict[StreamId, _Judged] = {}
        self._counted_vanished: dict[str, int] = {}
        self._dirty_streams: set[StreamId] = set()
        self._dirty_producers: set[str] = set()
        self.partitions = 0  # of the turn topic
        self.covered: set[int] = set()  # held when the last complete pass began
        self._covering: set[int] = set()
        self.caught_up = False  # a whole pass read: every producer's latest liveness known
        self.marks = JudgedMarks()
        self.retired = 0

    # -- passes over the compacted topic ------------------------------------------------
    def start_pass(self, records: Iterable[tuple[bytes, bytes | None]], partitions: int) -> None:
        """A pass from the topic's beginning: what was counted so far (the state topic's
        ``heads:`` records, from any member), and the turn topic's partition count."""
        self.load(records)
        self.partitions = partitions
        self._collecting |= self._uncollected  # with those of a pass cut short
        self._uncollected.clear()
        self._covering = self._held()
        self.marks.new_pass()

    def end_pass(self, now_ms: int) -> list[Vanishing]:
        """The pass reached the topic's end: the vanished producers collected are counted,
        each by one member of the group (the one proving its first open stream's partition:
        every member collects the same streams) and once per liveness record."""
        self.caught_up = True
        self.covered = self._covering
        self._collected |= self._collecting
        self._collecting = set()
        found = []
        for producer in sorted(self._collected):
            at, streams = self._vanished.get(producer), self._at_risk.get(producer)
            if at is None or not streams or self._counted_vanished.get(producer) == at:
                continue
            if streams[min(streams)].partition not in self.covered:
                continue  # another member's to count
            self._counted_vanished[producer] = at
            self._dirty_producers.add(producer)
            alive = self.liveness[producer]
            found.append(
                Vanishing(producer, alive.silent_ms(now_ms), alive.interval_ms, len(streams))
            )
        return found

    def refresh(self, now_ms: int) -> bool:
        """Partitions gone are forgotten, producers silent past the bound are vanished; True
        when a pass is wanted (a partition taken over since, or a producer to collect)."""
        held = self._held()
        for partition in [p for p in self._heaps if p not in held]:
            del self._heaps[partition]  # the new owner's to judge
        for stream in [s for s, w in self._ends.items() if w.partition not in held]:
            del self._ends[stream]
        self.marks.forget(held)
        self.covered &= held
        if self.caught_up:
            for producer, alive in self.liveness.items():
                if producer not in self._vanished and alive.vanished(now_ms):
                    self._vanished[producer] = alive.at_ms
                    self._uncollected.add(producer)
        return bool(self._uncollected or held - self.covered)

    def _held(self) -> set[int]:
        return {p for p in range(self.partitions) if self._engine.proved_offset(p) is not None}

    # -- records --------------------------------------------------------------------
    def take_liveness(self, alive: Liveness, now_ms: int) -> None:
        producer = alive.producer_id
        known = self.liveness.get(producer)
        if known is not None and known.at_ms >= alive.at_ms:
            return  # older: a pass reads the history again
        self.liveness[producer] = alive
        if producer in self._vanished and not alive.vanished(now_ms):
            self._drop_vanished(producer)  # it came back

    def take(
        self,
        note: HeadAnnouncement,
        high: Mapping[int, int],
        low: Mapping[int, int],
        at: HeadsAt | None = None,
    ) -> None:
        """An announcement, with the turn topic's watermarks taken after it was read, and
        where it was read in stream-heads."""
        stream, producer = note.head.stream, note.head.producer_id
        if producer == LEGACY_PRODUCER:
            return  # v1/v2 turns: no positions to hold them to
        read_from, last = self._engine.head_of(stream)  # both asked once (no side effects)
        partition = self._partition(stream, read_from)
        waiting = _Waiting(
            note, partition, high.get(partition, 0), low.get(partition, 0) == 0, at=at
        )
        if note.status != "open":
            self._taken_over(producer)
            if self._engine.proved_offset(partition) is None:
                return  # another member's
            if note.status == "ended" and last is not None and note.head.sequence <= last:
                # Reached its head: nothing to count. Judged before too when a run was
                # killed between the mark and the tombstone: the stream, still held, is
                # retired all the same (a retired one has no last position: not here).
                self._ends.pop(stream, None)
                self.marks.retire_later(stream, partition, at)
                return
            if self.marks.judged(partition, at):
                return  # judged already (a pass reads it again)
            self._ends[stream] = waiting
            self.marks.wait(stream, partition, at)
            self._push(waiting, None)
        elif producer in self._vanished:
            streams = self._at_risk.setdefault(producer, {})
            known = streams.get(stream)
            if known is not None and known.note.head.sequence >= note.head.sequence:
                if not known.judged:
                    self._push(known, producer)  # its partition may be this member's again
                return
            streams[stream] = waiting
            self._push(waiting, producer)

    def _partition(self, stream: StreamId, partition: int | None) -> int:
        """Where the stream's turns were read (``partition``), else where its key lands."""
        if partition is not None:
            return partition
        return self._key_partition(stream[0], self.partitions) if self.partitions > 0 else 0

    def _push(self, waiting: _Waiting, producer: str | None) -> None:
        if self._engine.proved_offset(waiting.partition) is None:
            return
        self._pushed += 1
        heap = self._heaps.setdefault(waiting.partition, [])
        heapq.heappush(heap, (waiting.need, self._pushed, waiting.note.head.stream, producer))

    def _taken_over(self, producer: str) -> None:
        """A final announcement of one of its streams: the producer's heads were taken over
        (a successor on its spool folder, or its own close); it is vanished no more."""
        if producer in self._vanished:
            self._drop_vanished(producer)
        known = self.liveness.get(producer)
        if known is None or not known.closed:
            self.liveness[producer] = Liveness(
                producer, known.at_ms if known else 0, known.interval_ms if known else 0, True
            )

    def _drop_vanished(self, producer: str) -> None:
        del self._vanished[producer]
        self._at_risk.pop(producer, None)
        self._uncollected.discard(producer)
        self._collecting.discard(producer)
        self._collected.discard(producer)

    # -- judgement ------------------------------------------------------------------
    def judge(self) -> list[StreamLoss]:
        """Every waiting stream whose partition is proved to its ``need``."""
        out = []
        for partition, heap in self._heaps.items():
            proved = self._engine.proved_offset(partition)
            if proved is None:
                continue
            while heap and heap[0][0] <= proved:
                _, _, stream, producer = heapq.heappop(heap)
                entry = (
                    self._ends.get(stream)
                    if producer is None
                    else self._at_risk.get(producer, {}).get(stream)
                )
                if entry is None or entry.judged or entry.partition != partition:
                    continue
                if entry.need > proved:
                    continue  # replaced by a later announcement, still in the heap
                loss = self._judge(entry, "crash" if producer is None else "vanished")
                if producer is None:
                    del self._ends[stream]
                else:
                    entry.judged = True
                if loss is not None:
                    out.append(loss)
        return out

    def _judge(self, entry: _Waiting, cause: LossCause) -> StreamLoss | None:
        note = entry.note
        stream = note.head.stream
        last = self._engine.last_position(stream)
        if last is None and not entry.whole:
            return None  # its turns may be older than the log start: not in range
        judged = self._judged.get(stream)
        floor = max(-1 if last is None else last, -1 if judged is None else judged.to)
        lost = max(0, note.head.sequence - floor)
        cut = note.status == "cut" and not (judged is not None and judged.cut)
        if not lost and not cut:
            if note.status == "ended" and judged is None:
                self.marks.retire_later(stream, entry.partition, entry.at)  # ended whole
            return None
        self._judged[stream] = _Judged(
            max(note.head.sequence, -1 if judged is None else judged.to),
            note.status == "cut" or (judged is not None and judged.cut),
        )
        self._dirty_streams.add(stream)
        return StreamLoss(
            cause,
            note.status,
            stream,
            entry.partition,
            note.head.sequence,
            last,
            lost,
            cut,
            note.pack,
            note.runtime,
        )

    # -- what it holds ----------------------------------------------------------------
    def vanished_producers(self) -> int:
        """Producers vanished now with open streams (any member's: the same on each)."""
        return sum(1 for producer in self._vanished if self._at_risk.get(producer))

    def streams_at_risk(self) -> int:
        """Open streams of vanished producers on this member's partitions."""
        held = self._held()
        return sum(
            1 for streams in self._at_risk.values() for w in streams.values() if w.partition in held
        )

    def waiting(self) -> int:
        """Announcements waiting for this member to prove their partition far enough."""
        held = self._held()
        at_risk = sum(
            1
            for streams in self._at_risk.values()
            for w in streams.values()
            if not w.judged and w.partition in held
        )
        return len(self._ends) + at_risk

    def waiting_ends(self) -> int:
        """End announcements held for the proof (the feed's bound)."""
        return len(self._ends)

    def counted_to(self, stream: StreamId) -> int | None:
        judged = self._judged.get(stream)
        return None if judged is None else judged.to

    # -- checkpoints --------------------------------------------------------------------
    def load(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """The state topic's ``heads:`` records (the latest per key wins; merged with what
        this judge counted since, never lowering it)."""
        for key, value in records:
            text = key.decode(errors="replace")
            if value is None:
                continue
            if text.startswith(JUDGED_STREAM_KEY):
                session, producer = json.loads(text[len(JUDGED_STREAM_KEY) :])
                data = json.loads(value)
                stream = (str(session), str(producer))
                known = self._judged.get(stream)
                self._judged[stream] = _Judged(
                    max(int(data["to"]), -1 if known is None else known.to),
                    bool(data["cut"]) or (known is not None and known.cut),
                )
            elif self.marks.load(text, value):
                continue
            elif text.startswith(JUDGED_PRODUCER_KEY):
                producer = text[len(JUDGED_PRODUCER_KEY) :]
                at = int(json.loads(value)["at_ms"])
                self._counted_vanished[producer] = max(at, self._counted_vanished.get(producer, at))

    def _still_waiting(self, stream: StreamId, partition: int, at: HeadsAt) -> bool:
        waiting = self._ends.get(stream)
        return waiting is not None and waiting.partition == partition and waiting.at == at

    def _move_marks(self) -> None:
        self.marks.move(self._covering & self._held(), self._still_waiting)

    def changed(self) -> bool:
        """Losses counted (to checkpoint at once); marks and retirement go with the next
        checkpoint, which ``marks.pending()`` asks for."""
        return bool(self._dirty_streams or self._dirty_producers)

    def checkpoint(self) -> list[tuple[bytes, bytes | None]]:
        """The records of what changed; the streams a mark written before covers are
        retired first (their tombstones go out with the engine's checkpoint)."""
        for stream in self.marks.take_ready():
            self.retired += self._engine.retire(stream)
        self._move_marks()
        records = self.marks.checkpoint()
        for stream in sorted(self._dirty_streams):
            judged = self._judged[stream]
            value = {"to": judged.to, "cut": judged.cut}
            records.append((judged_stream_key(stream), json.dumps(value).encode()))
        for producer in sorted(self._dirty_producers):
            value_at = {"at_ms": self._counted_vanished[producer]}
            records.append(
                ((JUDGED_PRODUCER_KEY + producer).encode(), json.dumps(value_at).encode())
            )
        self._dirty_streams.clear()
        self._dirty_producers.clear()
        return records
