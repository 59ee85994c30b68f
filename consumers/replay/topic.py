"""``topic:NAME``: the range's messages re-published, unchanged, to another topic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.producer import DeliveredMessage, DeliveryError, KafkaProducer
from turnaudit.kafka.topics import topic_specs
from turnaudit.records import Record
from turnaudit.replay.outputs import OutputContext, ReplayOutput

# Header on every message a topic replay publishes: where it was read.
SOURCE_HEADER = "turnaudit-replay-source"


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
        self._producer = KafkaProducer(
            settings.client_config(
                {
                    "linger.ms": 20,
                    "compression.type": "lz4",
                    "log_level": 0,
                    "queue.buffering.max.messages": 200_000,
                },
                **{"enable.idempotence": True, "acks": "all"},
            ),
            log_failures=False,
        )
        self._failures: list[str] = []
        self._published = 0

    def open(self, position: int) -> None:
        self._published = position

    def _delivered(self, error: DeliveryError | None, msg: DeliveredMessage) -> None:
        if error is not None:
            self._failures.append(str(error))

    def write(self, messages: Sequence[Record]) -> int:
        for msg in messages:
            # A consumed message's headers are a list of (name, value) pairs.
            headers = list(cast("list[tuple[str, Any]]", msg.headers() or []))
            headers.append((SOURCE_HEADER, f"{msg.topic()}/{msg.partition()}/{msg.offset()}"))
            kind, stamp = msg.timestamp()
            # A full local queue waits for room inside produce() (the producer's
            # on_full="wait"): it never raises BufferError here.
            self._producer.produce(
                self._topic,
                msg.value(),
                msg.key(),
                headers=headers,
                timestamp=stamp if kind else 0,
                on_delivery=self._delivered,
            )
            self._producer.poll(0)
        self._published += len(messages)
        return 0

    def sync(self) -> int:
        left = self._producer.flush(300)
        if left or self._failures:
            raise BrokerError(
                f"publishing to {self._topic}: {left} message(s) not acknowledged, "
                f"{len(self._failures)} failed"
                + (f" ({self._failures[0]})" if self._failures else "")
            )
        return self._published

    def finish(self) -> None:
        self.sync()
