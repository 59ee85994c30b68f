"""Replay: a bounded range of the turn-events topic, decoded by today's reader, into a file.

A replay is bounded, isolated, deterministic and resumable:

* **Bounded**: the end offsets (the high-water marks, or the offsets of the
  ``--to`` time) are resolved once, when the replay starts, and recorded in
  the checkpoint; a resumed replay keeps them, so it always covers the same
  events.
* **Isolated**: partitions are read by manual assignment with explicit offsets
  (:func:`turnaudit.kafka.reading.read_range`); nothing joins or commits to any
  consumer group.
* **Deterministic**: partitions in ascending order, each by offset; every line
  is canonical JSON (sorted keys, no spaces), so the same range gives the same
  bytes.
* **Resumable**: after every flushed batch a checkpoint (per-partition next
  offset and the output's byte length) replaces the previous one atomically
  (write, fsync, rename). A re-run with the same arguments truncates the
  output to the recorded length and carries on from the recorded offsets.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from turnaudit.errors import ConfigurationError
from turnaudit.events import occurred_moment
from turnaudit.kafka.reading import read_range
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify import RangeSpec, resolve_range

CHECKPOINT_SUFFIX = ".replay-checkpoint.json"
CHECKPOINT_FORMAT = 1
SINK_KINDS = ("jsonl", "metrics", "htir", "htir-topic")


class ReplayOutput(abc.ABC):
    """An output built from the whole range at once (a sink whose result is written at the end).

    Such an output is not resumed mid-range: an interrupted replay into it
    starts its range again (within the recorded bound); ``finish`` writes the
    result, which the replay then moves into place atomically.
    """

    @abc.abstractmethod
    def write(self, messages: Sequence[Message]) -> int:
        """Take a batch in order; return how many of its messages it could not use."""

    @abc.abstractmethod
    def finish(self) -> bytes: ...


OutputFactory = Callable[[], ReplayOutput]


@dataclass(frozen=True)
class ReplayTarget:
    """Where a replay writes: ``KIND:PATH`` (today: ``jsonl:PATH``)."""

    kind: str
    path: Path

    @classmethod
    def parse(cls, text: str) -> ReplayTarget:
        kind, sep, where = text.partition(":")
        if not sep or not where:
            raise ConfigurationError(f"--into {text!r}: write KIND:PATH, e.g. jsonl:out.jsonl")
        if kind not in SINK_KINDS:
            raise ConfigurationError(
                f"--into {text!r}: unknown sink kind {kind!r}; choose {', '.join(SINK_KINDS)}"
            )
        return cls(kind, Path(where))

    @property
    def checkpoint(self) -> Path:
        return self.path.with_name(self.path.name + CHECKPOINT_SUFFIX)


@dataclass(frozen=True)
class ReplayRequest:
    """What to replay; the same request resumes the same replay."""

    spec: RangeSpec = field(default_factory=RangeSpec)
    partitions: tuple[int, ...] | None = None
    topic: str | None = None

    def fingerprint(self, topic: str, target: ReplayTarget) -> str:
        """A digest of the arguments: a checkpoint resumes only the replay it was written by."""
        def when(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        def offsets(found: Mapping[int, int] | None) -> dict[str, int] | None:
            return {str(p): o for p, o in sorted(found.items())} if found is not None else None

        described = {
            "topic": topic, "kind": target.kind,
            "since": when(self.spec.since), "until": when(self.spec.until),
            "from_offsets": offsets(self.spec.from_offsets),
            "to_offsets": offsets(self.spec.to_offsets),
            "partitions": list(self.partitions) if self.partitions is not None else None,
        }
        return hashlib.sha256(_canonical(described)).hexdigest()


@dataclass
class ReplayCheckpoint:
    """The recorded bound and how far the output has got."""

    fingerprint: str
    topic: str
    start: dict[int, int]
    end: dict[int, int]
    next: dict[int, int]
    output_bytes: int
    events: int
    undecodable: int
    complete: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT, "fingerprint": self.fingerprint, "topic": self.topic,
            "order": "partitions ascending, each by offset",
            "start": _by_partition(self.start), "end": _by_partition(self.end),
            "next": _by_partition(self.next), "output_bytes": self.output_bytes,
            "events": self.events, "undecodable": self.undecodable, "complete": self.complete,
        }

    @classmethod
    def load(cls, path: Path) -> ReplayCheckpoint:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"format {raw.get('format')!r}")
            return cls(
                fingerprint=str(raw["fingerprint"]), topic=str(raw["topic"]),
                start=_partitions(raw["start"]), end=_partitions(raw["end"]),
                next=_partitions(raw["next"]), output_bytes=int(raw["output_bytes"]),
                events=int(raw["events"]), undecodable=int(raw["undecodable"]),
                complete=bool(raw["complete"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(
                f"{path} is not a replay checkpoint ({exc}); remove it to start over"
            ) from exc

    def save(self, path: Path) -> None:
        """Replace the checkpoint atomically: a reader sees the old one or the new one."""
        temporary = path.with_name(path.name + ".tmp")
        with temporary.open("wb") as out:
            out.write(json.dumps(self.as_json(), indent=2).encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)


@dataclass(frozen=True)
class ReplaySummary:
    topic: str
    start: dict[int, int]
    end: dict[int, int]
    events: int
    undecodable: int
    resumed: bool
    output: Path

    def human(self) -> str:
        spans = ", ".join(f"{p}:{self.start[p]}-{self.end[p]}" for p in sorted(self.end))
        return (f"replayed {self.events} events ({self.undecodable} undecodable) of {self.topic} "
                f"[{spans}] into {self.output}" + (" (resumed)" if self.resumed else ""))


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
    outputs: Mapping[str, OutputFactory] | None = None,
) -> ReplaySummary:
    """Replay the range of ``request`` into ``target``, resuming a recorded checkpoint.

    ``after_batch`` is called with each checkpoint once it is saved (progress).
    ``outputs`` builds the outputs of kinds other than ``jsonl`` (the command
    line wires the services' sinks there).
    """
    if batch_size < 1:
        raise ConfigurationError(f"batch size {batch_size}: must be >= 1")
    topic = request.topic or settings.topics.turn_events
    fingerprint = request.fingerprint(topic, target)
    checkpoint_path = target.checkpoint
    resumed = checkpoint_path.exists()
    if resumed:
        state = ReplayCheckpoint.load(checkpoint_path)
        if state.fingerprint != fingerprint:
            raise ConfigurationError(
                f"{checkpoint_path} belongs to a replay with other arguments; "
                "use another output or remove it (and the output) to start over"
            )
        if not target.path.exists() or target.path.stat().st_size < state.output_bytes:
            raise ConfigurationError(
                f"{target.path} is shorter than its checkpoint records "
                f"({state.output_bytes} bytes); remove both to start over"
            )
    else:
        state = _new_state(settings, request, topic, fingerprint, timeout)
        target.path.parent.mkdir(parents=True, exist_ok=True)
        target.path.write_bytes(b"")
        state.save(checkpoint_path)
    if target.kind != "jsonl":
        factory = (outputs or {}).get(target.kind)
        if factory is None:
            raise ConfigurationError(f"no output of kind {target.kind!r} was wired")
        _replay_whole(settings, topic, state, target, factory(), batch_size=batch_size,
                      timeout=timeout, after_batch=after_batch)
        return ReplaySummary(topic, state.start, state.end, state.events, state.undecodable,
                             resumed, target.path)
    with target.path.open("r+b") as out:
        # Whatever was written after the last checkpoint is written again.
        out.truncate(state.output_bytes)
        out.seek(state.output_bytes)
        for partition in sorted(state.end):
            if state.next[partition] >= state.end[partition]:
                continue
            batch: list[bytes] = []
            for msg in read_range(settings, topic, {partition: state.next[partition]},
                                  {partition: state.end[partition]}, timeout=timeout):
                line, decoded = _jsonl_line(decode, msg)
                batch.append(line)
                state.events += 1
                state.undecodable += 0 if decoded else 1
                state.next[partition] = int(msg.offset() or 0) + 1
                if len(batch) >= batch_size:
                    _flush(out, batch, state, checkpoint_path, after_batch)
            _flush(out, batch, state, checkpoint_path, after_batch)
    state.complete = True
    state.save(checkpoint_path)
    return ReplaySummary(topic, state.start, state.end, state.events, state.undecodable,
                         resumed, target.path)


def _replay_whole(settings: KafkaSettings, topic: str, state: ReplayCheckpoint,
                  target: ReplayTarget, output: ReplayOutput, *, batch_size: int,
                  timeout: float, after_batch: BatchHook | None) -> None:
    """The whole recorded range into ``output``; its result replaces the target atomically."""
    state.next, state.events, state.undecodable, state.output_bytes = dict(state.start), 0, 0, 0
    for partition in sorted(state.end):
        batch: list[Message] = []
        for msg in read_range(settings, topic, {partition: state.start[partition]},
                              {partition: state.end[partition]}, timeout=timeout):
            batch.append(msg)
            state.next[partition] = int(msg.offset() or 0) + 1
            if len(batch) >= batch_size:
                state.undecodable += output.write(batch)
                state.events += len(batch)
                batch = []
                if after_batch is not None:
                    after_batch(state)
        state.undecodable += output.write(batch)
        state.events += len(batch)
    result = output.finish()
    temporary = target.path.with_name(target.path.name + ".tmp")
    with temporary.open("wb") as out:
        out.write(result)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, target.path)
    state.output_bytes = len(result)
    state.complete = True
    state.save(target.checkpoint)


def _new_state(settings: KafkaSettings, request: ReplayRequest, topic: str,
               fingerprint: str, timeout: float) -> ReplayCheckpoint:
    start, end, _ = resolve_range(settings, topic, request.spec, timeout=min(timeout, 30.0))
    if request.partitions is not None:
        missing = sorted(set(request.partitions) - set(end))
        if missing:
            raise ConfigurationError(f"{topic} has no partition {', '.join(map(str, missing))}")
        start = {p: start[p] for p in request.partitions}
        end = {p: end[p] for p in request.partitions}
    end = {p: max(end[p], start[p]) for p in end}
    return ReplayCheckpoint(fingerprint, topic, start, end, dict(start), 0, 0, 0)


def _flush(out: Any, batch: list[bytes], state: ReplayCheckpoint, checkpoint: Path,
           after_batch: BatchHook | None) -> None:
    if batch:
        out.write(b"".join(batch))
        batch.clear()
    out.flush()
    os.fsync(out.fileno())
    state.output_bytes = out.tell()
    state.save(checkpoint)
    if after_batch is not None:
        after_batch(state)


def _jsonl_line(decode: TurnEventDeserializer, msg: Message) -> tuple[bytes, bool]:
    """One canonical JSON line: where the message was, and its event (or why it is not one)."""
    where: dict[str, Any] = {"partition": msg.partition(), "offset": msg.offset()}
    try:
        decoded = decode(msg.value())
    except Exception as exc:  # the decoder raises several types; the line records which
        where["error"] = f"{type(exc).__name__}: {exc}"
        return _canonical(where) + b"\n", False
    where["writer_version"] = decoded.writer_version
    # occurred_at as the ISO time replay lines have always held (decoded: epoch ms).
    event = decoded.event
    where["event"] = {**event, "occurred_at": occurred_moment(event["occurred_at"])}
    return _canonical(where) + b"\n", True


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_jsonable).encode("utf-8")


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
    "ReplayCheckpoint", "ReplayOutput", "ReplayRequest", "ReplaySummary", "ReplayTarget",
    "parse_partitions", "replay",
)
