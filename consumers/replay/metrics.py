"""``metrics:PATH``: the verdict-metrics sink on a private registry, as OpenMetrics text."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector

from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.replay.sink import SinkReplayOutput
from turnaudit.consumers.runtime.settings import MetricsSettings
from turnaudit.replay.files import write_atomically
from turnaudit.serialization.wire import TurnEventDeserializer

REPLAY_JOB = "turnaudit-replay"


class MetricsReplayOutput(SinkReplayOutput):
    """The verdict-metrics sink on a private registry, written as OpenMetrics text.

    Every series carries ``job="turnaudit-replay"`` and ``replay="<range>"``,
    so a scraped or imported replay file never adds to the live series. The
    sink's clock is fixed at 0 (the delivery delay of a replay means nothing),
    and ``_created`` samples are left out: the same range gives the same bytes.
    """

    def __init__(
        self,
        decode: TurnEventDeserializer,
        replay_label: str,
        path: Path,
        settings: MetricsSettings | None = None,
        *,
        start_gaps: bool = True,
    ):
        self.registry = CollectorRegistry()
        sink = VerdictMetricsSink(settings or MetricsSettings(), self.registry, clock=lambda: 0.0)
        super().__init__(sink, decode, start_gaps=start_gaps)
        self._label = replay_label
        self._path = path

    def text(self) -> bytes:
        labelled = CollectorRegistry()
        labelled.register(_Labelled(self.registry, {"job": REPLAY_JOB, "replay": self._label}))
        # The OpenMetrics module of prometheus_client has no annotations.
        text: bytes = generate_latest(labelled)  # type: ignore[no-untyped-call]  # see above
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
