"""The verdict metrics service: Prometheus counters of what the turns say.

Every label value comes from a closed set: the schema enums for path, output
policy, risk tier and verdicts, the shipped schema versions, and configured
allow-lists for pack and domain (anything else is ``other``), so new ids in
the stream cannot grow the number of series. Contract breaches, sequence gaps,
dead letters and lag come from the shared runtime (``ConsumerMetrics``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService
from turnaudit.consumers.settings import MetricsSettings, ServiceSettings
from turnaudit.contracts import SequenceOutcome
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


class VerdictMetricsSink:
    """Counts each turn once; redeliveries the runtime recognised are not counted again."""

    def __init__(
        self,
        settings: MetricsSettings,
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._packs = settings.packs
        self._domains = settings.domains
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
        # Label children by label values: .labels() takes a lock and builds a
        # key on every call, which costs as much as the rest of the counting.
        self._children: dict[tuple[Any, ...], Any] = {}

    def write(self, turns: Sequence[ConsumedTurn]) -> None:
        for turn in turns:
            if turn.sequence.outcome is SequenceOutcome.DUPLICATE:
                continue  # already counted; the runtime counts the redelivery itself
            self._count(turn.event, turn.decoded.writer_version)
            self.counted += 1

    def _count(self, event: dict[str, Any], writer_version: int) -> None:
        pack = closed(event["pack_id"], self._packs)
        domain = closed(event["domain"], self._domains)
        version = closed(str(writer_version), self._versions)
        path = closed(event["path"], _PATHS)
        bundle = event["verdicts"]
        self._child(self.turns, pack, domain, path, version).inc()
        if bundle["refusal_emitted"]:
            self._child(self.refused, pack, domain).inc()
        if bundle["hedge_injected"]:
            self._child(self.hedged, pack, domain).inc()
        if path == TurnPath.STUB.value:
            self._child(self.stub, pack, domain).inc()
        action = event["action_assessment"]
        if action is not None:
            self._child(
                self.action_risk,
                closed(action["output_policy"], _POLICIES),
                closed(action["risk_tier"], _TIERS),
                closed(action["action_risk_verdict"], _VERDICTS),
            ).inc()
        occurred = event["occurred_at"]
        seconds = occurred.timestamp() if isinstance(occurred, datetime) else occurred / 1000
        # A runtime clock ahead of ours would give a negative delay: count it as none.
        self.delay.observe(max(0.0, self._clock() - seconds))

    def _child(self, metric: Counter, *values: str) -> Any:
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def close(self) -> None:
        """Counters live in the registry; nothing to flush."""


class VerdictMetricsService(ConsumerService):
    """The verdict metrics service on the turn-events topic."""

    def __init__(self, settings: ServiceSettings, *, registry: CollectorRegistry, **options: Any):
        self.sink = VerdictMetricsSink(settings.metrics, registry)
        super().__init__(settings, self.sink, registry=registry, **options)
