"""Replay outputs beyond JSONL: the services' sinks (runtime validation and ``Sink``,
unchanged), ``turnaudit verify``'s report, and another topic.

Only the app wires stages: ``turnaudit replay`` registers these as output
kinds and hands them to :func:`turnaudit.replay.replay`.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from confluent_kafka import KafkaError, Message
from prometheus_client import CollectorRegistry, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector

from turnaudit.consumers.log_sink import LogSink, service_logging
from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.gc_sizing import batch_sized_gc
from turnaudit.consumers.runtime.handover import hand_over
from turnaudit.consumers.runtime.sink import ConsumedTurn, Sink
from turnaudit.consumers.runtime.validation import TurnEventValidation
from turnaudit.consumers.settings import LogSinkSettings, MetricsSettings
from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.kafka.producer import DeliveryCallback, KafkaProducer
from turnaudit.kafka.reading import end_offsets
from turnaudit.kafka.topics import topic_specs
from turnaudit.records import Record
from turnaudit.replay import (
    OutputContext,
    ReplayOutput,
    fsync_path,
    open_for_resume,
    write_atomically,
)
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.verify import Verifier, range_report, resolve_range

REPLAY_JOB = "turnaudit-replay"


def _count_only(*_args: object) -> None:
    """A replay writes nothing to live topics: what the runtime would dead-letter is
    counted (``hand_over`` returns how many) and set aside."""
# Header on every message a topic replay publishes: where it was read.
SOURCE_HEADER = "turnaudit-replay-source"


class SinkReplayOutput(ReplayOutput):
    """Messages through ``TurnEventValidation`` into a runtime ``Sink``, batch by batch.

    Turns that break a contract reach the sink only if it wants them, as in
    the services; rejected messages are counted, not dead-lettered (a replay
    writes nothing to live topics). A sink's result covers the whole range:
    an interrupted replay into it starts its range again.
    """

    def __init__(self, sink: Sink, decode: TurnEventDeserializer, max_sessions: int = 100_000,
                 *, start_gaps: bool = True):
        """``start_gaps=False`` for an event-time window: a stream's first turn
        in it is where the stream starts (see ``StreamTracker``)."""
        self.sink = sink
        # The runtime's own figures (consumed, rejected, identity) stay in a
        # registry of their own: the output holds the sink's series only.
        self._validation = TurnEventValidation(
            decode, ConsumerMetrics(CollectorRegistry()), max_sessions, start_gaps=start_gaps
        )

    def _examine(self, messages: Sequence[Record], take: Callable[[ConsumedTurn], None]) -> int:
        """The runtime's hand-over; a rejected message is counted, not dead-lettered."""
        return hand_over(
            messages,
            self._validation.examine,
            take,
            _count_only,
            wants_breaching=self.sink.wants_breaching_turns,
        ).rejected

    def warm(self, messages: Sequence[Record]) -> None:
        """The validation's stream tracker sees the already-written prefix again."""
        self._examine(messages, _count_only)

    def write(self, messages: Sequence[Record]) -> int:
        batch_sized_gc.enter(len(messages))  # as the runtime's loop does, for the same reason
        try:
            # As the runtime does: no decoded record is held until the batch ends.
            rejected = self._examine(messages, self.sink.take)
            self.sink.flush()
        finally:
            batch_sized_gc.exit()
        self.sink.tick()
        return rejected

    def finish(self) -> None:
        self.sink.close()


class LogReplayOutput(SinkReplayOutput):
    """The log sink (``LogSink``, unchanged) writing one file, resumable like JSONL.

    Deterministic rendering: each line's ``timestamp`` is the turn's
    ``occurred_at`` (``event_time=True``); while the output is open structlog
    has the services' configuration (``service_logging``), so the sink renders
    its canonical lines itself; and every batch is written in an empty
    ``contextvars`` context, so no context-local value of the caller lands in
    a line. The file never rotates. On resume the runtime's stream tracker is
    warmed with the already-written prefix, so ``redelivered`` flags come out
    as in an uninterrupted run.
    """

    resumable = True
    needs_warmup = True

    def __init__(self, path: Path, decode: TurnEventDeserializer,
                 settings: LogSinkSettings | None = None, *, start_gaps: bool = True) -> None:
        self._path = path
        self._start_gaps = start_gaps
        self._settings = settings or LogSinkSettings()
        self._decode = decode
        self._logging = contextlib.ExitStack()
        self._opened = self._finished = False

    def open(self, position: int) -> None:
        open_for_resume(self._path, position).close()
        self._logging.enter_context(service_logging())
        # One file, never rotated (its length is the checkpoint's position).
        settings = LogSinkSettings(self._settings.redaction, self._settings.hash_key,
                                   self._path, file_max_bytes=1 << 62, file_backups=0)
        super().__init__(LogSink(settings, CollectorRegistry(), event_time=True), self._decode,
                         start_gaps=self._start_gaps)
        self._opened = True

    def write(self, messages: Sequence[Record]) -> int:
        return contextvars.Context().run(super().write, messages)

    def sync(self) -> int:
        return fsync_path(self._path)

    def finish(self) -> None:
        super().finish()
        self._finished = True

    def close(self) -> None:
        if self._opened and not self._finished:
            self.sink.close()  # interrupted: release the file (every batch was flushed)
        self._logging.close()


class MetricsReplayOutput(SinkReplayOutput):
    """The verdict-metrics sink on a private registry, written as OpenMetrics text.

    Every series carries ``job="turnaudit-replay"`` and ``replay="<range>"``,
    so a scraped or imported replay file never adds to the live series. The
    sink's clock is fixed at 0 (the delivery delay of a replay means nothing),
    and ``_created`` samples are left out: the same range gives the same bytes.
    """

    def __init__(self, decode: TurnEventDeserializer, replay_label: str, path: Path,
                 settings: MetricsSettings | None = None, *, start_gaps: bool = True):
        self.registry = CollectorRegistry()
        sink = VerdictMetricsSink(settings or MetricsSettings(), self.registry, clock=lambda: 0.0)
        super().__init__(sink, decode, start_gaps=start_gaps)
        self._label = replay_label
        self._path = path

    def text(self) -> bytes:
        labelled = CollectorRegistry()
        labelled.register(_Labelled(self.registry, {"job": REPLAY_JOB, "replay": self._label}))
        # The OpenMetrics module of prometheus_client has no annotations.
        text: bytes = generate_latest(labelled)  # type: ignore[no-untyped-call]
        return text

    def finish(self) -> None:
        super().finish()
        write_atomically(self._path, self.text())


class _Labelled(Collector):
    """Another registry's families with constant labels added, without ``_created`` samples."""

    def __init__(self, source: CollectorRegistry, labels: dict[str, str]):
        self._source = source
        self._labels = labels

    def collect(self) -> Iterable[Metric]:
        for family in self._source.collect():
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = [
                sample._replace(labels={**sample.labels, **self._labels})
                for sample in family.samples
                if not sample.name.endswith("_created")
            ]
            yield copy


class VerifyReplayOutput(ReplayOutput):
    """``turnaudit verify``'s report over the replayed range, as canonical JSON.

    The same ``Verifier`` as ``turnaudit verify`` (every version decoded,
    contracts, the stream tracker, exact counts), fed in the replay's order,
    with the dead letters of the range; written at the end with sorted keys,
    so the same range gives the same bytes (as long as no dead letter for
    the range is added in between).
    """

    def __init__(self, context: OutputContext) -> None:
        self._context = context
        _, _, self._low = resolve_range(context.settings, context.topic, context.request.spec)
        self._verifier = Verifier(context.decode, log_start_offsets=self._low,
                                  start_gaps=not context.request.event_time)

    def write(self, messages: Sequence[Record]) -> int:
        undecodable = len(self._verifier.undecodable)
        for msg in messages:
            _, stamp = msg.timestamp()
            self._verifier.feed(msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(),
                                stamp)
        return len(self._verifier.undecodable) - undecodable

    def finish(self) -> None:
        c = self._context
        report = range_report(c.settings, c.topic, c.request.spec, self._verifier,
                              start=c.start, end=c.end, low=self._low)
        document = report.as_json()
        document["replay"] = {"label": c.label, "event_time": c.request.event_time}
        write_atomically(c.target.path, json.dumps(
            document, sort_keys=True, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")


def writable_topic(context: OutputContext, kind: str) -> str:
    """The topic of ``--into KIND:NAME``, refused with one line when it is one of
    the project's live topics (turn events, schemas, dead letters, HTIR traces,
    auditor observations) or the replay's own source, or does not exist."""
    topic = context.target.where
    live = {spec.name for spec in topic_specs(context.settings)} | {context.topic}
    if topic in live:
        raise ConfigurationError(
            f"--into {kind}:{topic}: a replay does not write to the live topic {topic}; "
            f"choose a topic of its own"
        )
    end_offsets(context.settings, topic)  # one line if the topic does not exist
    return topic


class TopicReplayOutput(ReplayOutput):
    """Re-publishes the range's messages, unchanged, to another topic.

    Each message keeps its key (so the same partitioner puts a session's turns
    in one partition, in order), value, headers and record timestamp, plus a
    ``turnaudit-replay-source`` header ``topic/partition/offset``. The producer
    is idempotent (``enable.idempotence``, ``acks=all``): no retry inside a run
    duplicates or reorders a message. A checkpoint is taken only once every
    message before it is acknowledged; after a crash, the messages published
    since the last checkpoint are published again, so across an interruption
    the copy is at-least-once: a repeat has the same event id and source
    header (the services count it once; a reader can drop it by the header).
    The project's live topics and the source topic are refused.
    """

    resumable = True

    def __init__(self, context: OutputContext) -> None:
        settings = context.settings
        self._topic = writable_topic(context, "topic")
        self._producer = KafkaProducer(settings.client_config(
            {"linger.ms": 20, "compression.type": "lz4", "log_level": 0,
             "queue.buffering.max.messages": 200_000},
            **{"enable.idempotence": True, "acks": "all"},
        ), log_failures=False)
        self._failures: list[str] = []
        self._published = 0

    def open(self, position: int) -> None:
        self._published = position

    def _delivered(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            self._failures.append(str(error))

    def write(self, messages: Sequence[Record]) -> int:
        for msg in messages:
            # A consumed message's headers are a list of (name, value) pairs.
            headers = list(cast("list[tuple[str, Any]]", msg.headers() or []))
            headers.append((SOURCE_HEADER, f"{msg.topic()}/{msg.partition()}/{msg.offset()}"))
            kind, stamp = msg.timestamp()
            while True:
                try:
                    self._producer.produce(self._topic, msg.value(), msg.key(), headers=headers,
                                           timestamp=stamp if kind else 0,  # (its _delivered
                                           # names librdkafka's types: what a report carries)
                                           on_delivery=cast("DeliveryCallback", self._delivered))
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self._producer.poll(0.1)
            self._producer.poll(0)
        self._published += len(messages)
        return 0

    def sync(self) -> int:
        left = self._producer.flush(300)
        if left or self._failures:
            raise BrokerError(
                f"publishing to {self._topic}: {left} message(s) not acknowledged, "
                f"{len(self._failures)} failed" + (f" ({self._failures[0]})" if self._failures
                                                   else "")
            )
        return self._published

    def finish(self) -> None:
        self.sync()
