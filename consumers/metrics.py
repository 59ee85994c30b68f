"""The verdict metrics service: Prometheus counters of what the turns say.

Every label value comes from a closed or bounded set: the schema enums for
path, output policy, risk tier and verdicts, the shipped schema versions, and
for pack and domain a configured allow-list or else the first
``TURNAUDIT_METRICS_LABEL_LIMIT`` ids seen (``turnaudit.label_bounds``;
anything else is ``other``), so new ids in the stream cannot grow the number
of series. Contract breaches, sequence gaps, dead letters and lag come from
the shared runtime (``ConsumerMetrics``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService, Sink
from turnaudit.consumers.settings import MetricsSettings, ServiceSettings
from turnaudit.label_bounds import BoundedLabelSet, LabelBoundMetrics
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.verdicts import OutputPolicy, RiskTier, TurnPath, Verdict

OTHER = "other"
# From sub-millisecond to a backlog of minutes; fine steps under 100 ms,
# where the latency goal is.
DELAY_BUCKETS = (
    0.005,
    0.01,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    15.0,
    60.0,
    300.0,
    float("inf"),
)


def closed(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else OTHER


_PATHS = frozenset(p.value for p in TurnPath)
_POLICIES = frozenset(p.value for p in OutputPolicy)
_TIERS = frozenset(t.value for t in RiskTier)
_VERDICTS = frozenset(v.value for v in Verdict)


class VerdictMetricsSink(Sink):
    """Counts each turn once; redeliveries the runtime recognised are not counted again."""

    def __init__(
        self,
        settings: MetricsSettings,
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        bounds = LabelBoundMetrics(registry)
        self._packs = BoundedLabelSet(
            "pack",
            allowed=settings.packs,
            limit=settings.label_limit,
            metrics=bounds,
            setting="TURNAUDIT_METRICS_LABEL_LIMIT",
        )
        self._domains = BoundedLabelSet(
            "domain",
            allowed=settings.domains,
            limit=settings.label_limit,
            metrics=bounds,
            setting="TURNAUDIT_METRICS_LABEL_LIMIT",
        )
        self._versions = frozenset(str(s.version) for s in shipped_catalog().versions)
        self._clock = clock
        self.turns = Counter(
            "turnaudit_turns",
            "Turns counted, by pack, domain, path and writer schema version.",
            ["pack", "domain", "path", "schema_version"],
            registry=registry,
        )
        self.refused = Counter(
            "turnaudit_refused_turns",
            "Turns whose bundle says refusal_emitted.",
            ["pack", "domain"],
            registry=registry,
        )
        self.hedged = Counter(
            "turnaudit_hedged_turns",
            "Turns whose bundle says hedge_injected.",
            ["pack", "domain"],
            registry=registry,
        )
        self.stub = Counter(
            "turnaudit_stub_turns",
            "Stub-path turns (cold start, unknown domain).",
            ["pack", "domain"],
            registry=registry,
        )
        self.action_risk = Counter(
            "turnaudit_action_risk",
            "Action assessments by output policy, risk tier and action-risk verdict.",
            ["output_policy", "risk_tier", "action_risk_verdict"],
            registry=registry,
        )
        self.delay = Histogram(
            "turnaudit_turn_count_delay_seconds",
            "Delay from the turn's occurred_at to the turn being counted.",
            buckets=DELAY_BUCKETS,
            registry=registry,
        )
        self.counted = 0  # turns counted by this process (the demo and tests read it)
        # Label children by (metric, *label values): .labels() takes a lock and
        # builds a key on every call, which costs as much as the rest of the counting.
        self._children: dict[tuple[Any, ...], Any] = {}

    def write(self, turns: Sequence[ConsumedTurn]) -> None:
        # The batch's turns tallied by their raw label values first (one tuple
        # and one dict update per turn), then closed and added with one
        # ``inc(n)`` per series: a counter's ``inc`` takes a lock, and most
        # turns of a batch share a handful of label sets.
        tally: dict[tuple[Any, ...], int] = {}
        occurred: list[Any] = []
        for turn in turns:
            # By event id: a restarted runtime's new turns count, a redelivery does not.
            if not turn.sequence.counts_as_turn:
                continue  # already counted; the runtime counts the redelivery itself
            decoded = turn.decoded
            event = decoded.event
            bundle = event["verdicts"]
            action = event["action_assessment"]
            key = (
                event["pack_id"],
                event["domain"],
                event["path"],
                decoded.writer_version,
                bundle["refusal_emitted"],
                bundle["hedge_injected"],
                None
                if action is None
                else (action["output_policy"], action["risk_tier"], action["action_risk_verdict"]),
            )
            tally[key] = tally.get(key, 0) + 1
            occurred.append(event["occurred_at"])
        if not occurred:
            return
        self._count(tally)
        # Observed once the batch is counted: the delay to the moment it shows.
        now = self._clock()
        observe = self.delay.observe
        for moment in occurred:
            seconds = moment.timestamp() if isinstance(moment, datetime) else moment / 1000
            # A runtime clock ahead of ours would give a negative delay: count it as none.
            observe(max(0.0, now - seconds))
        self.counted += len(occurred)

    def _count(self, tally: dict[tuple[Any, ...], int]) -> None:
        """Each series' increase for the batch, added once."""
        per_series: dict[tuple[Any, ...], int] = {}
        for (pack_id, domain_id, path_id, writer_version, refused, hedged, action), n in (
            tally.items()
        ):
            pack = self._packs(pack_id)
            domain = self._domains(domain_id)
            path = closed(path_id, _PATHS)
            version = closed(str(writer_version), self._versions)
            keys: list[tuple[Any, ...]] = [(self.turns, pack, domain, path, version)]
            if refused:
                keys.append((self.refused, pack, domain))
            if hedged:
                keys.append((self.hedged, pack, domain))
            if path == TurnPath.STUB.value:
                keys.append((self.stub, pack, domain))
            if action is not None:
                policy, tier, verdict = action
                keys.append(
                    (
                        self.action_risk,
                        closed(policy, _POLICIES),
                        closed(tier, _TIERS),
                        closed(verdict, _VERDICTS),
                    )
                )
            for key in keys:
                per_series[key] = per_series.get(key, 0) + n
        for key, n in per_series.items():  # key: (metric, *label values)
            child = self._children.get(key)
            if child is None:
                metric, *values = key
                child = self._children[key] = metric.labels(*values)
            child.inc(n)

    def close(self) -> None:
        """Counters live in the registry; nothing to flush."""


class VerdictMetricsService(ConsumerService):
    """The verdict metrics service on the turn-events topic."""

    def __init__(self, settings: ServiceSettings, *, registry: CollectorRegistry, **options: Any):
        self.sink = VerdictMetricsSink(settings.metrics, registry)
        super().__init__(settings, self.sink, registry=registry, **options)
