"""The services' sinks as replay outputs: the runtime's validation and ``Sink``, unchanged.

Only the app wires stages: ``turnaudit replay`` builds these and hands them to
:func:`turnaudit.replay.replay`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from confluent_kafka import Message
from prometheus_client import CollectorRegistry, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector

from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.sink import ConsumedTurn, Sink
from turnaudit.consumers.runtime.validation import TurnEventValidation
from turnaudit.consumers.settings import MetricsSettings
from turnaudit.replay import ReplayOutput
from turnaudit.serialization.wire import TurnEventDeserializer

REPLAY_JOB = "turnaudit-replay"


class SinkReplayOutput(ReplayOutput):
    """Messages through ``TurnEventValidation`` into a runtime ``Sink``, batch by batch.

    Turns that break a contract reach the sink only if it wants them, as in
    the services; rejected messages are counted, not dead-lettered (a replay
    writes nothing to live topics).
    """

    def __init__(self, sink: Sink, decode: TurnEventDeserializer, max_sessions: int = 100_000):
        self.sink = sink
        # The runtime's own figures (consumed, rejected, identity) stay in a
        # registry of their own: the output holds the sink's series only.
        self._validation = TurnEventValidation(
            decode, ConsumerMetrics(CollectorRegistry()), max_sessions
        )

    def write(self, messages: Sequence[Message]) -> int:
        turns: list[ConsumedTurn] = []
        rejected = 0
        for msg in messages:
            found = self._validation.examine(
                msg.value(), msg.key(), msg.topic() or "", msg.partition() or 0,
                msg.offset() or 0,
            )
            if not isinstance(found, ConsumedTurn):
                rejected += 1
            elif found.rejection is None or self.sink.wants_breaching_turns:
                turns.append(found)
        if turns:
            self.sink.write(turns)
        self.sink.tick()
        return rejected

    def finish(self) -> bytes:
        self.sink.close()
        return b""


class MetricsReplayOutput(SinkReplayOutput):
    """The verdict-metrics sink on a private registry, written as OpenMetrics text.

    Every series carries ``job="turnaudit-replay"`` and ``replay="<range>"``,
    so a scraped or imported replay file never adds to the live series. The
    sink's clock is fixed at 0 (the delivery delay of a replay means nothing),
    and ``_created`` samples are left out: the same range gives the same bytes.
    """

    def __init__(self, decode: TurnEventDeserializer, replay_label: str,
                 settings: MetricsSettings | None = None):
        self.registry = CollectorRegistry()
        sink = VerdictMetricsSink(settings or MetricsSettings(), self.registry, clock=lambda: 0.0)
        super().__init__(sink, decode)
        self._label = replay_label

    def finish(self) -> bytes:
        super().finish()
        labelled = CollectorRegistry()
        labelled.register(_Labelled(self.registry, {"job": REPLAY_JOB, "replay": self._label}))
        # The OpenMetrics module of prometheus_client has no annotations.
        text: bytes = generate_latest(labelled)  # type: ignore[no-untyped-call]
        return text


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
