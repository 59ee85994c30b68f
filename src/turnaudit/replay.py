"""Replay: a bounded range of the turn-events topic, decoded by today's reader, into an output.

A replay is bounded, isolated, deterministic, resumable and scales out:

* **Bounded**: the end offsets (the high-water marks, or the offsets of the
  ``--to`` time) are resolved once, when the replay starts, and recorded in
  the checkpoint; a resumed replay keeps them, so it always covers the same
  events.
* **Isolated**: one consumer is assigned every partition of the range by hand
  with explicit offsets; nothing joins or commits to any consumer group (a
  ``group`` replay, :func:`replay_group`, uses a group of its own, named
  ``turnaudit-replay.NAME``).
* **Ordered, deterministic**: each partition by offset; partitions interleave
  in blocks of :data:`BLOCK_MESSAGES` messages in ascending partition order
  (partition 0's first block, partition 1's first block, …, then every
  partition's second block; a partition whose range has ended drops out).
  The order depends on the range only, never on which partition the broker
  answered first: partitions running ahead are buffered, and paused while
  their buffer is full. Every JSONL line is canonical JSON (sorted keys, no
  spaces). The same range gives the same bytes.
* **Resumable**: every ``checkpoint_every`` events or ``checkpoint_seconds``
  seconds, the output is made durable (fsync) and the checkpoint (per-partition
  next offset, place in the block order, the output's position) replaces the
  previous one atomically (write, fsync, rename). A re-run with the same
  arguments truncates the output to the recorded position and carries on from
  the recorded offsets. Outputs whose result is computed over the whole range
  (metrics, verify) restart their recorded range instead.
* **Windows by event time**: ``ReplayRequest(event_time=True)`` keeps the
  events whose ``occurred_at`` falls in ``[since, until)``, read from a broker
  range widened by ``slack`` on both sides (default: the whole retained
  stream), since a record's broker timestamp is the time it was stored, not
  the time the turn happened.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any, ClassVar

import orjson
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.events import occurred_millis, occurred_moment
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

CHECKPOINT_SUFFIX = ".replay-checkpoint.json"
CHECKPOINT_FORMAT = 2
# Messages a partition contributes before the next partition's turn; part of
# the stated order (and of the checkpoint), independent of the batch size.
BLOCK_MESSAGES = 1000
ORDER = (f"each partition by offset; partitions in ascending order, interleaved in blocks of "
         f"{BLOCK_MESSAGES} messages")
GROUP_PREFIX = "turnaudit-replay."
# Messages buffered ahead across all partitions: a partition holding its share
# (at least two blocks) pauses its fetching, so memory does not grow with the
# partition count (64 partitions at 20,000 each would hold 1.3 M messages).
_BUFFER_BUDGET = 60_000
_BUFFER_FLOOR = 2 * BLOCK_MESSAGES
# librdkafka: fetch large and keep a deep local queue (a replay reads, it does not wait).
READER_CONFIG: dict[str, object] = {
    "log_level": 0,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.min.messages": 200_000,
    "queued.max.messages.kbytes": 256 * 1024,
    "fetch.wait.max.ms": 100,
}


# -- outputs ------------------------------------------------------------------------------


class ReplayOutput(abc.ABC):
    """Where a replay puts the messages of its range. Hooks, in the order the replay calls them:

    * ``open(position)`` once: ``position`` is what ``sync`` returned at the
      last checkpoint (0 for a new replay). A resumable output drops anything
      after it; a non-resumable one is always opened at 0 and gets the whole
      range again.
    * ``warm(messages)`` on resume, for ``needs_warmup`` outputs only: the
      messages already written before ``position``, in order, to rebuild state
      (e.g. the runtime's stream tracker) without writing anything.
    * ``write(messages)`` for every batch in the replay's order; returns how
      many of them it could not use (undecodable, rejected).
    * ``sync()`` at every checkpoint: makes what was written durable and
      returns the position to record.
    * ``finish()`` once at the end of the range: completes the output (a
      whole-range output writes its file here, atomically).
    * ``close()`` always, last, also after a failure or an interruption.
    """

    resumable: ClassVar[bool] = False
    needs_warmup: ClassVar[bool] = False

    def open(self, position: int) -> None:
        return

    def warm(self, messages: Sequence[Message]) -> None:
        return

    @abc.abstractmethod
    def write(self, messages: Sequence[Message]) -> int: ...

    def sync(self) -> int:
        return 0

    @abc.abstractmethod
    def finish(self) -> None: ...

    def close(self) -> None:
        return


@dataclass(frozen=True)
class OutputContext:
    """What an output is built from: the target and the recorded range."""

    settings: KafkaSettings
    decode: TurnEventDeserializer
    topic: str
    target: ReplayTarget
    request: ReplayRequest
    label: str  # a short digest of the replay's arguments
    start: Mapping[int, int]
    end: Mapping[int, int]


OutputFactory = Callable[[OutputContext], ReplayOutput]


@dataclass(frozen=True)
class OutputKind:
    """A kind of ``--into KIND:WHERE``: a file, or a topic when ``writes_file`` is False."""

    name: str
    help: str
    build: OutputFactory
    writes_file: bool = True


class OutputKinds:
    """The registry of output kinds a replay can write; one ``add`` per kind."""

    def __init__(self) -> None:
        self._kinds: dict[str, OutputKind] = {}

    def add(self, name: str, help: str, build: OutputFactory, *,
            writes_file: bool = True) -> None:
        if name in self._kinds:
            raise ValueError(f"output kind {name!r} is registered twice")
        self._kinds[name] = OutputKind(name, help, build, writes_file)

    def get(self, name: str) -> OutputKind | None:
        return self._kinds.get(name)

    def names(self) -> list[str]:
        return list(self._kinds)

    def describe(self) -> str:
        return "; ".join(
            f"{k.name}:{'PATH' if k.writes_file else 'TOPIC'} ({k.help})"
            for k in self._kinds.values()
        )


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def fsync_path(path: Path) -> int:
    """fsync a file written through another handle; returns its size."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def open_for_resume(path: Path, position: int) -> IO[bytes]:
    """The output file cut back to ``position`` (what the last checkpoint recorded)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if position == 0:
        path.write_bytes(b"")
    elif not path.exists() or path.stat().st_size < position:
        raise ConfigurationError(
            f"{path} is shorter than its checkpoint records ({position} bytes); "
            "remove both to start over"
        )
    out = path.open("r+b")
    out.truncate(position)
    out.seek(position)
    return out


class JsonlOutput(ReplayOutput):
    """One canonical JSON line per message: where it was, its writer version and decoded event
    (or why it could not be decoded)."""

    resumable = True

    def __init__(self, path: Path, decode: TurnEventDeserializer) -> None:
        self._path = path
        self._decode = decode
        self._out: IO[bytes] | None = None

    def open(self, position: int) -> None:
        # Whatever was written after the last checkpoint is written again.
        self._out = open_for_resume(self._path, position)

    def write(self, messages: Sequence[Message]) -> int:
        assert self._out is not None, "open() first"
        undecodable = 0
        lines = []
        for msg in messages:
            line, decoded = jsonl_line(self._decode, msg)
            lines.append(line)
            undecodable += not decoded
        self._out.write(b"".join(lines))
        return undecodable

    def sync(self) -> int:
        assert self._out is not None, "open() first"
        self._out.flush()
        os.fsync(self._out.fileno())
        return self._out.tell()

    def finish(self) -> None:
        self.sync()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


# -- what to replay -----------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayTarget:
    """Where a replay writes: ``KIND:WHERE`` and the checkpoint file that records its progress."""

    kind: str
    where: str
    checkpoint: Path

    @property
    def path(self) -> Path:
        return Path(self.where)

    @classmethod
    def parse(cls, text: str, kinds: OutputKinds, checkpoint: Path | None = None) -> ReplayTarget:
        kind, sep, where = text.partition(":")
        if not sep or not where:
            raise ConfigurationError(f"--into {text!r}: write KIND:WHERE, e.g. jsonl:out.jsonl")
        found = kinds.get(kind)
        if found is None:
            raise ConfigurationError(
                f"--into {text!r}: unknown sink kind {kind!r}; choose {', '.join(kinds.names())}"
            )
        if checkpoint is None:
            # A topic output records its progress in the working folder.
            base = Path(where) if found.writes_file else Path(f"{kind}-{where}")
            checkpoint = base.with_name(base.name + CHECKPOINT_SUFFIX)
        return cls(kind, where, checkpoint)

    @classmethod
    def file(cls, kind: str, path: Path) -> ReplayTarget:
        """A file output with its checkpoint beside it (``PATH.replay-checkpoint.json``)."""
        return cls(kind, str(path), path.with_name(path.name + CHECKPOINT_SUFFIX))


@dataclass(frozen=True)
class ReplayRequest:
    """What to replay; the same request resumes the same replay.

    ``event_time``: ``spec.since``/``spec.until`` select events by their
    ``occurred_at``, read from the broker range ``[since - slack, until +
    slack)`` by broker time, or the whole retained stream without ``slack``.
    """

    spec: RangeSpec = field(default_factory=RangeSpec)
    partitions: tuple[int, ...] | None = None
    topic: str | None = None
    event_time: bool = False
    slack: timedelta | None = None

    def fingerprint(self, topic: str, target: ReplayTarget) -> str:
        """A digest of the arguments: a checkpoint resumes only the replay it was written by."""
        def when(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        def offsets(found: Mapping[int, int] | None) -> dict[str, int] | None:
            return _by_partition(found) if found is not None else None

        described = {
            "topic": topic, "kind": target.kind,
            "since": when(self.spec.since), "until": when(self.spec.until),
            "from_offsets": offsets(self.spec.from_offsets),
            "to_offsets": offsets(self.spec.to_offsets),
            "partitions": list(self.partitions) if self.partitions is not None else None,
            "event_time": self.event_time,
            "slack_s": None if self.slack is None else self.slack.total_seconds(),
            "block": BLOCK_MESSAGES,
        }
        return hashlib.sha256(canonical_json(described)).hexdigest()


@dataclass
class ReplayCheckpoint:
    """The recorded bound and how far the output has got.

    ``cursor``/``taken``: the partition whose block is being written and how
    many of that block's messages are written (the place in the block order).
    ``window``: the event-time window in epoch millis, when there is one.
    """

    fingerprint: str
    topic: str
    start: dict[int, int]
    end: dict[int, int]
    next: dict[int, int]
    output_bytes: int
    events: int
    undecodable: int
    complete: bool = False
    cursor: int | None = None
    taken: int = 0
    window: tuple[int, int] | None = None
    outside_window: int = 0

    @property
    def total(self) -> int:
        """Messages in the broker range."""
        return sum(self.end[p] - self.start[p] for p in self.end)

    @property
    def read(self) -> int:
        """Messages of the broker range read so far (written or outside the window)."""
        return sum(self.next.get(p, self.start[p]) - self.start[p] for p in self.end)

    def as_json(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT, "fingerprint": self.fingerprint, "topic": self.topic,
            "order": ORDER, "block": BLOCK_MESSAGES,
            "start": _by_partition(self.start), "end": _by_partition(self.end),
            "next": _by_partition(self.next), "cursor": self.cursor, "taken": self.taken,
            "window_ms": None if self.window is None else list(self.window),
            "output_bytes": self.output_bytes, "events": self.events,
            "undecodable": self.undecodable, "outside_window": self.outside_window,
            "complete": self.complete,
        }

    @classmethod
    def load(cls, path: Path) -> ReplayCheckpoint:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"format {raw.get('format')!r}")
            window = raw["window_ms"]
            return cls(
                fingerprint=str(raw["fingerprint"]), topic=str(raw["topic"]),
                start=_partitions(raw["start"]), end=_partitions(raw["end"]),
                next=_partitions(raw["next"]), output_bytes=int(raw["output_bytes"]),
                events=int(raw["events"]), undecodable=int(raw["undecodable"]),
                complete=bool(raw["complete"]),
                cursor=None if raw["cursor"] is None else int(raw["cursor"]),
                taken=int(raw["taken"]),
                window=None if window is None else (int(window[0]), int(window[1])),
                outside_window=int(raw["outside_window"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise ConfigurationError(
                f"{path} is not a replay checkpoint ({exc}); remove it to start over"
            ) from exc

    def save(self, path: Path) -> None:
        """Replace the checkpoint atomically: a reader sees the old one or the new one."""
        write_atomically(path, json.dumps(self.as_json(), indent=2).encode() + b"\n")


@dataclass(frozen=True)
class ReplaySummary:
    topic: str
    start: dict[int, int]
    end: dict[int, int]
    events: int
    undecodable: int
    resumed: bool
    output: str
    outside_window: int = 0

    def human(self) -> str:
        spans = ", ".join(f"{p}:{self.start[p]}-{self.end[p]}" for p in sorted(self.end))
        skipped = (f", {self.outside_window} outside the time window"
                   if self.outside_window else "")
        return (f"replayed {self.events} events ({self.undecodable} undecodable{skipped}) of "
                f"{self.topic} [{spans}] into {self.output}"
                + (" (resumed)" if self.resumed else ""))


BatchHook = Callable[[ReplayCheckpoint], None]


def replay(
    settings: KafkaSettings,
    decode: TurnEventDeserializer,
    request: ReplayRequest,
    target: ReplayTarget,
    *,
    batch_size: int = 500,
    timeout: float = 300.0,
    after_batch: BatchHook | None = None,
    outputs: Mapping[str, OutputFactory] | OutputKinds | None = None,
    checkpoint_every: int = 50_000,
    checkpoint_seconds: float = 5.0,
) -> ReplaySummary:
    """Replay the range of ``request`` into ``target``, resuming a recorded checkpoint.

    ``after_batch`` is called with the state after every batch (progress).
    ``outputs`` builds the outputs of kinds other than ``jsonl`` (the command
    line passes its registry of kinds). ``timeout``: seconds without a message
    while the range is unfinished before giving up.
    """
    if batch_size < 1:
        raise ConfigurationError(f"batch size {batch_size}: must be >= 1")
    if checkpoint_every < 1:
        raise ConfigurationError(f"checkpoint every {checkpoint_every} events: must be >= 1")
    factory = output_factory(target.kind, decode, outputs)
    topic = request.topic or settings.topics.turn_events
    fingerprint = request.fingerprint(topic, target)
    resumed = target.checkpoint.exists()
    state = (_recorded(target.checkpoint, fingerprint) if resumed
             else new_state(settings, request, topic, fingerprint, timeout))
    context = OutputContext(settings, decode, topic, target, request, fingerprint[:12],
                            state.start, state.end)
    output = factory(context)  # a refused output leaves no checkpoint behind
    if not resumed:
        state.save(target.checkpoint)
    try:
        if not output.resumable:
            _restart(state)
        output.open(state.output_bytes if output.resumable else 0)
        if output.resumable and output.needs_warmup and state.read:
            _warm(settings, decode, state, output, batch_size=batch_size, timeout=timeout)
        reader = OrderedReader(settings, state, timeout=timeout)
        since_sync, synced_at = 0, time.monotonic()
        for batch in reader.batches(batch_size):
            kept = in_window(decode, batch, state)
            if kept:
                state.undecodable += output.write(kept)
                state.events += len(kept)
                since_sync += len(kept)
            if output.resumable and (since_sync >= checkpoint_every
                                     or time.monotonic() - synced_at >= checkpoint_seconds):
                state.output_bytes = output.sync()
                state.save(target.checkpoint)
                since_sync, synced_at = 0, time.monotonic()
            if after_batch is not None:
                after_batch(state)
        state.output_bytes = output.sync()
        output.finish()
        state.complete = True
        state.save(target.checkpoint)
    finally:
        output.close()
    return ReplaySummary(topic, state.start, state.end, state.events, state.undecodable,
                         resumed, target.where, state.outside_window)


def _recorded(checkpoint: Path, fingerprint: str) -> ReplayCheckpoint:
    state = ReplayCheckpoint.load(checkpoint)
    if state.fingerprint != fingerprint:
        raise ConfigurationError(
            f"{checkpoint} belongs to a replay with other arguments; "
            "use another output or remove it (and the output) to start over"
        )
    return state


def output_factory(kind: str, decode: TurnEventDeserializer,
                   outputs: Mapping[str, OutputFactory] | OutputKinds | None) -> OutputFactory:
    """The factory of ``kind``: from ``outputs``, or the built-in JSONL output."""
    if isinstance(outputs, OutputKinds):
        found = outputs.get(kind)
        if found is not None:
            return found.build
    elif outputs is not None and kind in outputs:
        return outputs[kind]
    if kind == "jsonl":
        return lambda context: JsonlOutput(context.target.path, context.decode)
    raise ConfigurationError(f"no output of kind {kind!r} was wired")


def _restart(state: ReplayCheckpoint) -> None:
    """A whole-range output gets its recorded range from the start again."""
    state.next, state.cursor, state.taken = dict(state.start), None, 0
    state.events = state.undecodable = state.outside_window = state.output_bytes = 0
    state.complete = False


def _warm(settings: KafkaSettings, decode: TurnEventDeserializer, state: ReplayCheckpoint,
          output: ReplayOutput, *, batch_size: int, timeout: float) -> None:
    """Feed the already-written prefix to the output's state, in the same order.

    The prefix of the block order up to the checkpoint is the block order of
    the range cut at the checkpoint's offsets: every partition but the cursor's
    stands at a block boundary.
    """
    prefix = ReplayCheckpoint(state.fingerprint, state.topic, dict(state.start),
                              dict(state.next), dict(state.start), 0, 0, 0,
                              window=state.window)
    for batch in OrderedReader(settings, prefix, timeout=timeout).batches(batch_size):
        kept = in_window(decode, batch, prefix)
        if kept:
            output.warm(kept)


def in_window(decode: TurnEventDeserializer, batch: list[Message],
               state: ReplayCheckpoint) -> list[Message]:
    """The messages whose event happened in the window (all of them without one).

    An undecodable message has no event time: it is kept, so the output
    reports it.
    """
    if state.window is None:
        return batch
    low, high = state.window
    kept = []
    for msg in batch:
        try:
            millis = occurred_millis(decode(msg.value()).event["occurred_at"])
        except Exception:  # the decoder raises several types; the output reports them
            kept.append(msg)
            continue
        if low <= millis < high:
            kept.append(msg)
        else:
            state.outside_window += 1
    return kept


def new_state(settings: KafkaSettings, request: ReplayRequest, topic: str,
              fingerprint: str, timeout: float) -> ReplayCheckpoint:
    """Resolve the request's broker range now: the bound every resume keeps."""
    spec, window = request.spec, None
    if request.event_time:
        since, until = spec.since, spec.until
        if since is None or until is None:
            raise ConfigurationError("an event-time window needs both --from and --to")
        window = (occurred_millis(since), occurred_millis(until))
        if request.slack is None:
            spec = RangeSpec(None, None, spec.from_offsets, spec.to_offsets)
        else:
            spec = RangeSpec(since - request.slack, until + request.slack,
                             spec.from_offsets, spec.to_offsets)
    resolved = resolve_range(settings, topic, spec, timeout=min(timeout, 30.0))
    start, end = resolved.start, resolved.end
    if request.partitions is not None:
        missing = sorted(set(request.partitions) - set(end))
        if missing:
            raise ConfigurationError(f"{topic} has no partition {', '.join(map(str, missing))}")
        start = {p: start[p] for p in request.partitions}
        end = {p: end[p] for p in request.partitions}
    end = {p: max(end[p], start[p]) for p in end}
    return ReplayCheckpoint(fingerprint, topic, start, end, dict(start), 0, 0, 0, window=window)


# -- reading in the stated order ----------------------------------------------------------


class OrderedReader:
    """The range's messages in the block order, from one consumer assigned every partition.

    Advances ``state.next``, ``state.cursor`` and ``state.taken`` as it hands
    out messages, so the state at any batch boundary resumes the same order.
    """

    def __init__(self, settings: KafkaSettings, state: ReplayCheckpoint, *,
                 timeout: float = 300.0) -> None:
        self._settings = settings
        self._state = state
        self._timeout = timeout
        self._active = [p for p in sorted(state.end) if state.next[p] < state.end[p]]
        self._at = self._active.index(state.cursor) if state.cursor in self._active else 0
        if state.cursor not in self._active:
            state.taken = 0
        # Per partition the fetched messages and the index of the first not yet handed out:
        # a block leaves as one slice, not message by message.
        self._buffers: dict[int, list[Message]] = {p: [] for p in self._active}
        self._heads = dict.fromkeys(self._active, 0)
        self._fetched = {p: state.next[p] for p in self._active}
        self._paused: set[int] = set()

    def batches(self, batch_size: int) -> Iterator[list[Message]]:
        if not self._active:
            return
        topic = self._state.topic
        consumer = Consumer(self._settings.client_config(
            READER_CONFIG, **{"group.id": f"turnaudit-replay-reader-{uuid.uuid4().hex}"}))
        try:
            consumer.assign([TopicPartition(topic, p, self._state.next[p])
                             for p in self._active])
            last_message = time.monotonic()
            while self._active:
                batch = self._emit(batch_size)
                if batch:
                    yield batch
                elif self._active:
                    if self._fetch(consumer):
                        last_message = time.monotonic()
                    elif time.monotonic() - last_message > self._timeout:
                        raise BrokerError(
                            f"no message of {topic} for {self._timeout:.0f} s: partitions "
                            f"{self._active} unfinished (next offsets "
                            f"{ {p: self._state.next[p] for p in self._active} })"
                        )
        except KafkaException as exc:
            raise BrokerError(f"reading {topic}: {exc}") from exc
        finally:
            consumer.close()

    def _emit(self, batch_size: int) -> list[Message]:
        """Up to ``batch_size`` buffered messages in the block order; fewer when the
        partition whose turn it is has nothing buffered."""
        state, active = self._state, self._active
        batch: list[Message] = []
        while active and len(batch) < batch_size:
            p = state.cursor = active[self._at]
            buffer, head = self._buffers[p], self._heads[p]
            # Buffered messages are below the bound (see _fetch): taking the one just
            # below it ends the partition.
            take = min(len(buffer) - head, BLOCK_MESSAGES - state.taken, batch_size - len(batch))
            if take > 0:
                batch += buffer[head:head + take]
                head += take
                state.taken += take
                state.next[p] = int(buffer[head - 1].offset() or 0) + 1
                if head * 2 >= len(buffer):  # drop what was handed out
                    del buffer[:head]
                    head = 0
                self._heads[p] = head
            if state.next[p] >= state.end[p]:  # the partition's range is done
                active.pop(self._at)
            elif state.taken >= BLOCK_MESSAGES:
                self._at += 1
            else:
                break  # the batch is full, or waiting for this partition's next messages
            state.taken = 0
            if active:
                self._at %= len(active)
                state.cursor = active[self._at]
        return batch

    def _fetch(self, consumer: Consumer) -> bool:
        """Buffer what the broker sent; False when nothing came."""
        topic, end = self._state.topic, self._state.end
        self._flow(consumer, waiting=self._active[self._at])
        got = consumer.consume(num_messages=10_000, timeout=0.2)
        for msg in got:
            if msg.error() is not None:
                raise BrokerError(f"reading {topic}: {msg.error()}")
            where, offset = msg.partition(), msg.offset()
            if where is None or offset is None or where not in self._fetched:
                continue
            if offset < self._fetched[where] or offset >= end[where]:
                continue  # a refetch after a pause, or beyond the bound
            self._fetched[where] = offset + 1
            self._buffers[where].append(msg)
        return bool(got)

    def _flow(self, consumer: Consumer, *, waiting: int) -> None:
        """Pause partitions whose buffer is full; resume them once it has drained."""
        topic, paused = self._state.topic, self._paused
        limit = max(_BUFFER_FLOOR, _BUFFER_BUDGET // len(self._active))
        held = {p: len(self._buffers[p]) - self._heads[p] for p in self._active}
        stop = [p for p in self._active if p != waiting and p not in paused
                and held[p] >= limit]
        go = [p for p in paused if p in self._active
              and (p == waiting or held[p] < limit // 2)]
        if stop:
            consumer.pause([TopicPartition(topic, p) for p in stop])
            paused.update(stop)
        if go:
            consumer.resume([TopicPartition(topic, p) for p in go])
            paused.difference_update(go)


# -- canonical JSON -------------------------------------------------------------------------


def jsonl_line(decode: TurnEventDeserializer, msg: Message) -> tuple[bytes, bool]:
    """One canonical JSON line: where the message was, and its event (or why it is not one)."""
    where: dict[str, Any] = {"partition": msg.partition(), "offset": msg.offset()}
    try:
        decoded = decode(msg.value())
    except Exception as exc:  # the decoder raises several types; the line records which
        where["error"] = f"{type(exc).__name__}: {exc}"
        return canonical_json(where) + b"\n", False
    where["writer_version"] = decoded.writer_version
    # occurred_at as the ISO time replay lines have always held (decoded: epoch ms).
    event = decoded.event
    where["event"] = {**event, "occurred_at": occurred_moment(event["occurred_at"])}
    return canonical_json(where) + b"\n", True


_ORJSON = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8; bytes as hex, datetimes as ``isoformat()`` writes
    them (orjson's own RFC 3339 rendering is the same text, without a Python call)."""
    return orjson.dumps(value, default=_jsonable, option=_ORJSON)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _by_partition(found: Mapping[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in sorted(found.items())}


def _partitions(raw: Mapping[str, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in raw.items()}


def parse_partitions(text: str) -> tuple[int, ...]:
    try:
        found = tuple(sorted({int(p) for p in text.split(",") if p.strip()}))
    except ValueError:
        raise ConfigurationError(f"--partitions {text!r}: write a list like 0,2") from None
    if not found or min(found) < 0:
        raise ConfigurationError(f"--partitions {text!r}: partitions are >= 0")
    return found


__all__: Sequence[str] = (
    "BLOCK_MESSAGES", "JsonlOutput", "OrderedReader", "OutputContext", "OutputKind",
    "OutputKinds", "ReplayCheckpoint", "ReplayOutput", "ReplayRequest", "ReplaySummary",
    "ReplayTarget", "canonical_json", "parse_partitions", "replay",
    "write_atomically",
)
