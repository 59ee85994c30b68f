"""``replay()``: a bounded range, in the block order, into an output; and what it shares
with ``replay_group()``: the prologue (arguments checked, output built, the recorded
checkpoint) and the epilogue (output completed, checkpoint marked complete)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from turnaudit.archive.reading import ArchiveFeed
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.offsets import EventWindow, event_time_range, resolve_range
from turnaudit.records import Record
from turnaudit.replay.archived import archive_feed, range_with_archive
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.replay.jsonl import JsonlOutput
from turnaudit.replay.outputs import OutputContext, OutputFactory, OutputKinds, ReplayOutput
from turnaudit.replay.reader import OrderedReader
from turnaudit.replay.request import ReplayRequest, ReplayTarget
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

Outputs = Mapping[str, OutputFactory] | OutputKinds
BatchHook = Callable[[ReplayCheckpoint], None]


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
        skipped = f", {self.outside_window} outside the time window" if self.outside_window else ""
        return (
            f"replayed {self.events} events ({self.undecodable} undecodable{skipped}) of "
            f"{self.topic} [{spans}] into {self.output}" + (" (resumed)" if self.resumed else "")
        )


def replay(
    settings: KafkaSettings,
    decode: TurnEventDeserializer,
    request: ReplayRequest,
    target: ReplayTarget,
    *,
    batch_size: int = 500,
    timeout: float = 300.0,
    after_batch: BatchHook | None = None,
    outputs: Outputs | None = None,
    checkpoint_every: int = 50_000,
    checkpoint_seconds: float = 5.0,
) -> ReplaySummary:
    """Replay the range of ``request`` into ``target``, resuming a recorded checkpoint.

    ``after_batch`` is called with the state after every batch (progress).
    ``outputs`` builds the outputs of kinds other than ``jsonl`` (the command
    line passes its registry of kinds). ``timeout``: seconds without a message
    while the range is unfinished before giving up.
    """
    run = Prologue.of(
        settings,
        decode,
        request,
        target,
        outputs,
        batch_size=batch_size,
        checkpoint_every=checkpoint_every,
    )
    state = run.recorded or run.resolve(timeout)
    feed = (
        None
        if request.archive is None
        else archive_feed(settings, request.archive, state, timeout)  # a gap: before output
    )
    output = run.build(state.start, state.end)  # a refused output leaves no checkpoint behind
    if not run.resumed:
        state.save(target.checkpoint)
    with closing(output):
        if not output.resumable:
            _restart(state)
        output.open(state.output_bytes if output.resumable else 0)
        if output.resumable and output.needs_warmup and state.read:
            _warm(settings, decode, state, output, feed, batch_size=batch_size, timeout=timeout)
        reader = OrderedReader(settings, state, timeout=timeout, archive=feed)
        since_sync, synced_at = 0, time.monotonic()
        for batch in reader.batches(batch_size):
            kept = in_window(decode, batch, state)
            if kept:
                state.undecodable += output.write(kept)
                state.events += len(kept)
                since_sync += len(kept)
            if output.resumable and (
                since_sync >= checkpoint_every or time.monotonic() - synced_at >= checkpoint_seconds
            ):
                state.output_bytes = output.sync()
                state.save(target.checkpoint)
                since_sync, synced_at = 0, time.monotonic()
            if after_batch is not None:
                after_batch(state)
        return run.conclude(output, state)


# -- prologue and epilogue ------------------------------------------------------------------


@dataclass(frozen=True)
class Prologue:
    """A replay's arguments checked and resolved: the topic, the digest of the arguments,
    the output's factory and the checkpoint recorded by an earlier run (if any)."""

    settings: KafkaSettings
    decode: TurnEventDeserializer
    request: ReplayRequest
    target: ReplayTarget
    topic: str
    fingerprint: str
    factory: OutputFactory
    recorded: ReplayCheckpoint | None

    @classmethod
    def of(
        cls,
        settings: KafkaSettings,
        decode: TurnEventDeserializer,
        request: ReplayRequest,
        target: ReplayTarget,
        outputs: Outputs | None,
        *,
        batch_size: int,
        checkpoint_every: int,
    ) -> Prologue:
        if batch_size < 1:
            raise ConfigurationError(f"batch size {batch_size}: must be >= 1")
        if checkpoint_every < 1:
            raise ConfigurationError(f"checkpoint every {checkpoint_every} events: must be >= 1")
        factory = output_factory(target.kind, outputs)
        topic = request.topic or settings.topics.turn_events
        fingerprint = request.fingerprint(topic, target)
        recorded = _recorded(target.checkpoint, fingerprint) if target.checkpoint.exists() else None
        return cls(settings, decode, request, target, topic, fingerprint, factory, recorded)

    @property
    def resumed(self) -> bool:
        return self.recorded is not None

    def resolve(self, timeout: float) -> ReplayCheckpoint:
        """The request's broker range resolved now (a new replay's bound)."""
        return new_state(self.settings, self.request, self.topic, self.fingerprint, timeout)

    def build(self, start: Mapping[int, int], end: Mapping[int, int]) -> ReplayOutput:
        """The output, given the recorded range."""
        return self.factory(
            OutputContext(
                self.settings,
                self.decode,
                self.topic,
                self.target,
                self.request,
                self.fingerprint[:12],
                start,
                end,
            )
        )

    def conclude(self, output: ReplayOutput, state: ReplayCheckpoint) -> ReplaySummary:
        """The range is read: the output made durable and completed, the checkpoint
        marked complete."""
        state.output_bytes = output.sync()
        output.finish()
        state.complete = True
        state.save(self.target.checkpoint)
        return ReplaySummary(
            self.topic,
            dict(state.start),
            dict(state.end),
            state.events,
            state.undecodable,
            self.resumed,
            self.target.where,
            state.outside_window,
        )


@contextmanager
def closing(output: ReplayOutput) -> Iterator[ReplayOutput]:
    """``output.close()`` always, also after a failure or an interruption."""
    try:
        yield output
    finally:
        output.close()


def _recorded(checkpoint: Path, fingerprint: str) -> ReplayCheckpoint:
    state = ReplayCheckpoint.load(checkpoint)
    if state.fingerprint != fingerprint:
        raise ConfigurationError(
            f"{checkpoint} belongs to a replay with other arguments; "
            "use another output or remove it (and the output) to start over"
        )
    return state


def output_factory(kind: str, outputs: Outputs | None) -> OutputFactory:
    """The factory of ``kind``: from ``outputs``, or the built-in JSONL output."""
    if isinstance(outputs, OutputKinds):
        found = outputs.get(kind)
        if found is not None:
            return found.build
    elif outputs is not None and kind in outputs:
        return outputs[kind]
    if kind == "jsonl":
        return lambda context: JsonlOutput(
            context.target.path, context.decode, context.request.surfaces
        )
    raise ConfigurationError(f"no output of kind {kind!r} was wired")


def new_state(
    settings: KafkaSettings, request: ReplayRequest, topic: str, fingerprint: str, timeout: float
) -> ReplayCheckpoint:
    """Resolve the request's broker range now: the bound every resume keeps."""
    spec, window = request.spec, None
    if request.event_time:
        spec, found = event_time_range(spec, request.slack)
        window = (found.low, found.high)
    resolved = (
        resolve_range(settings, topic, spec, timeout=min(timeout, 30.0))
        if request.archive is None
        else range_with_archive(settings, request.archive, topic, spec, min(timeout, 30.0))
    )
    start, end = resolved.start, resolved.end
    if request.partitions is not None:
        missing = sorted(set(request.partitions) - set(end))
        if missing:
            raise ConfigurationError(f"{topic} has no partition {', '.join(map(str, missing))}")
        start = {p: start[p] for p in request.partitions}
        end = {p: end[p] for p in request.partitions}
    end = {p: max(end[p], start[p]) for p in end}
    return ReplayCheckpoint(fingerprint, topic, start, end, dict(start), 0, 0, 0, window=window)


# -- what replay() does between them ---------------------------------------------------------


def _restart(state: ReplayCheckpoint) -> None:
    """A whole-range output gets its recorded range from the start again."""
    state.next, state.cursor, state.taken = dict(state.start), None, 0
    state.events = state.undecodable = state.outside_window = state.output_bytes = 0
    state.complete = False


def _warm(
    settings: KafkaSettings,
    decode: TurnEventDeserializer,
    state: ReplayCheckpoint,
    output: ReplayOutput,
    feed: ArchiveFeed | None,
    *,
    batch_size: int,
    timeout: float,
) -> None:
    """Feed the already-written prefix to the output's state, in the same order.

    The prefix of the block order up to the checkpoint is the block order of
    the range cut at the checkpoint's offsets (:func:`prefix_state`).
    """
    prefix = prefix_state(state)
    reader = OrderedReader(settings, prefix, timeout=timeout, archive=feed)
    for batch in reader.batches(batch_size):
        kept = in_window(decode, batch, prefix)
        if kept:
            output.warm(kept)


def prefix_state(state: ReplayCheckpoint) -> ReplayCheckpoint:
    """A new replay of the range cut at ``state``'s next offsets: its block order is the
    prefix of the range's up to ``state`` (every partition but the cursor's stands at a
    block boundary)."""
    return ReplayCheckpoint(
        state.fingerprint,
        state.topic,
        dict(state.start),
        dict(state.next),
        dict(state.start),
        0,
        0,
        0,
        window=state.window,
    )


def in_window(
    decode: TurnEventDeserializer, batch: list[Record], state: ReplayCheckpoint
) -> list[Record]:
    """The messages whose event happened in the window (all of them without one).

    An undecodable message has no event time: it is kept, so the output
    reports it.
    """
    if state.window is None:
        return batch
    window = EventWindow(*state.window)
    kept = []
    for msg in batch:
        try:
            inside = window.holds(decode(msg.value()).event["occurred_at"])
        except Exception:  # the decoder raises several types; the output reports them
            kept.append(msg)
            continue
        if inside:
            kept.append(msg)
        else:
            state.outside_window += 1
    return kept
