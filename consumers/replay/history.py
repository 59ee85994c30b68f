"""Metric history from the stream: ``metrics:PATH`` with ``--step``, and ``tsdb:DIR``.

The verdict-metrics sink runs once per step of event time (each turn goes to
the sink of the step its ``occurred_at`` falls in, whatever order the replay
reads partitions in); at the end every counter series is written as OpenMetrics
text with one timestamped sample per step boundary, cumulative from the first
step of the range (0 before a series' first turn), so ``x - x offset STEP`` at a
boundary is exactly the turns of the step before it. ``tsdb:DIR`` then turns the
file into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics``; a
Prometheus server that loads them answers over the replayed range.

Only counter families are written (turns, refused, hedged, breaches, …): the
sink's gauges and the delivery-delay histogram describe a live service, not the
stream. Series carry ``job="turnaudit-replay"`` and ``replay="<range>"`` as the
whole-range output does, so they never add to live series. Memory: one private
registry per step that holds turns (a week at one-minute steps is 10,080).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.replay.metrics import REPLAY_JOB
from turnaudit.consumers.replay.sink import SinkReplayOutput
from turnaudit.consumers.runtime.settings import MetricsSettings
from turnaudit.consumers.runtime.sink import ConsumedTurn, Sink
from turnaudit.errors import ConfigurationError
from turnaudit.files import private_dir
from turnaudit.replay.files import write_atomically
from turnaudit.serialization.wire import TurnEventDeserializer

Labels = tuple[tuple[str, str], ...]
# sample name -> labels -> value, for one step
StepSamples = dict[str, dict[Labels, float]]


class StepSinks(Sink):
    """One verdict-metrics sink per step of event time, made when a turn needs it."""

    marks_redeliveries = VerdictMetricsSink.marks_redeliveries

    def __init__(self, step_ms: int, settings: MetricsSettings) -> None:
        if step_ms <= 0:
            raise ValueError("a step is a positive number of milliseconds")
        self.step_ms = step_ms
        self._settings = settings
        self.registries: dict[int, CollectorRegistry] = {}  # step index -> its counters
        self._sinks: dict[int, VerdictMetricsSink] = {}
        self._taken: set[int] = set()

    def take(self, turn: ConsumedTurn) -> None:
        index = turn.event["occurred_at"] // self.step_ms
        sink = self._sinks.get(index)
        if sink is None:
            registry = self.registries[index] = CollectorRegistry()
            sink = self._sinks[index] = VerdictMetricsSink(
                self._settings, registry, clock=lambda: 0.0
            )
        sink.take(turn)
        self._taken.add(index)

    def flush(self) -> None:
        for index in sorted(self._taken):
            self._sinks[index].flush()
        self._taken.clear()

    def close(self) -> None:
        for sink in self._sinks.values():
            sink.close()


def counter_samples(registry: CollectorRegistry) -> tuple[StepSamples, dict[str, tuple[str, str]]]:
    """A registry's counter samples (``_created`` left out), and each family's
    (documentation, sample names' family) for the text's headers."""
    samples: StepSamples = {}
    families: dict[str, tuple[str, str]] = {}
    for family in registry.collect():
        if family.type != "counter":
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            families[sample.name] = (family.name, family.documentation)
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples, families


def history_text(
    steps: Mapping[int, StepSamples],
    families: Mapping[str, tuple[str, str]],
    step_ms: int,
    extra_labels: Mapping[str, str],
) -> bytes:
    """OpenMetrics text: every series at every step boundary from the range's first
    step to its last, cumulative, timestamps in seconds; ``# EOF`` at the end."""
    if not steps:
        return b"# EOF\n"
    first, last = min(steps), max(steps)
    lines: list[str] = []
    by_family: dict[str, list[str]] = {}
    for name, (family, _) in families.items():
        by_family.setdefault(family, []).append(name)
    for family in sorted(by_family):
        lines.append(f"# TYPE {family} counter")
        lines.append(f"# HELP {family} {_escape_help(families[by_family[family][0]][1])}")
        for name in sorted(by_family[family]):
            series = sorted({labels for s in steps.values() for labels in s.get(name, {})})
            for labels in series:
                rendered = _labels({**dict(labels), **extra_labels})
                total = 0.0
                # The sample at the start of the first step is 0: the first step's turns count.
                lines.append(f"{name}{rendered} 0 {first * step_ms / 1000:.3f}")
                for index in range(first, last + 1):
                    total += steps.get(index, {}).get(name, {}).get(labels, 0.0)
                    at = (index + 1) * step_ms / 1000
                    lines.append(f"{name}{rendered} {_number(total)} {at:.3f}")
    lines.append("# EOF")
    return ("\n".join(lines) + "\n").encode()


def _labels(labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


class SteppedMetricsReplayOutput(SinkReplayOutput):
    """``metrics:PATH --step S``: the verdict counters with one timestamped sample per step."""

    def __init__(
        self,
        decode: TurnEventDeserializer,
        replay_label: str,
        path: Path,
        step_ms: int,
        settings: MetricsSettings | None = None,
        *,
        start_gaps: bool = True,
    ):
        self.steps = StepSinks(step_ms, settings or MetricsSettings())
        super().__init__(self.steps, decode, start_gaps=start_gaps)
        self._label = replay_label
        self._path = path

    def text(self) -> bytes:
        steps: dict[int, StepSamples] = {}
        families: dict[str, tuple[str, str]] = {}
        for index, registry in self.steps.registries.items():
            steps[index], found = counter_samples(registry)
            families.update(found)
        return history_text(
            steps, families, self.steps.step_ms, {"job": REPLAY_JOB, "replay": self._label}
        )

    def finish(self) -> None:
        super().finish()
        write_atomically(self._path, self.text())


class TsdbReplayOutput(SteppedMetricsReplayOutput):
    """``tsdb:DIR``: the stepped OpenMetrics file, then TSDB blocks made by promtool in DIR."""

    OPENMETRICS = "replay.om"

    def __init__(
        self,
        decode: TurnEventDeserializer,
        replay_label: str,
        directory: Path,
        step_ms: int,
        *,
        start_gaps: bool = True,
        promtool: str | None = None,
    ):
        found = promtool or shutil.which("promtool")
        if found is None:
            raise ConfigurationError(
                "tsdb: needs promtool on PATH (Debian: apt-get install prometheus)"
            )
        self._promtool = found
        self._directory = directory
        private_dir(directory)
        super().__init__(
            decode, replay_label, directory / self.OPENMETRICS, step_ms, start_gaps=start_gaps
        )

    def finish(self) -> None:
        super().finish()
        made = subprocess.run(
            [
                self._promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(self._path),
                str(self._directory),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            why = (made.stderr.strip() or made.stdout.strip()).splitlines()
            raise ConfigurationError(
                f"promtool could not make blocks from {self._path}: {why[-1] if why else '?'}"
            )

    def blocks(self) -> Iterator[Path]:
        """The block folders promtool wrote (ULID names)."""
        return (p for p in self._directory.iterdir() if p.is_dir() and len(p.name) == 26)
