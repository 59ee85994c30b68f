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
from bisect import bisect_left
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService, Sink
from turnaudit.consumers.runtime.settings import MetricsSettings, ServiceSettings
from turnaudit.consumers.runtime.sink import NativeTallies
from turnaudit.events import occurred_millis
from turnaudit.label_bounds import BoundedLabelSet, LabelBoundMetrics
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.telemetry import (
    ACTION_RISK_TOTAL,
    HEDGED_TURNS_TOTAL,
    REDRIVEN_HEDGED_TURNS_TOTAL,
    REDRIVEN_REFUSED_TURNS_TOTAL,
    REDRIVEN_STUB_TURNS_TOTAL,
    REDRIVEN_TURNS_TOTAL,
    REFUSED_TURNS_TOTAL,
    STUB_TURNS_TOTAL,
    TURNS_TOTAL,
)
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


# Distinct tally keys remembered with their children (a few hundred in practice).
_RESOLVED_BOUND = 20_000


def closed(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else OTHER


def observe_many(histogram: Histogram, amounts: Sequence[float]) -> None:
    """``histogram.observe(a)`` for every amount, with one lock per bucket touched.

    ``observe`` takes two locks per call (sum and bucket); a batch's delays
    land in a few buckets. Works on the histogram's own values (their
    ``inc``), so the single-process and the multiprocess (mmap) modes both
    see the same as from ``observe``; tests hold it to ``observe`` sample by sample.
    """
    if not amounts:
        return
    bounds = histogram._upper_bounds
    per_bucket = [0] * len(bounds)
    for amount in amounts:
        per_bucket[bisect_left(bounds, amount)] += 1  # the first bound >= amount, as observe
    _add_to_buckets(histogram, per_bucket, sum(amounts))


def delay_s(now_ms: float, occurred_ms: int) -> float:
    """A turn's count delay: from its occurred_at to ``now`` (a runtime clock ahead of
    ours would give a negative delay: counted as none)."""
    return max(0.0, now_ms - occurred_ms) / 1000


def observe_delays(histogram: Histogram, occurred_ms: list[int], now_ms: float) -> None:
    """``histogram.observe(delay_s(now_ms, ms))`` for every occurred_at of a batch, with
    no Python step per turn: the delay falls as occurred_at rises, so, sorted, each
    bucket holds a run of them, found by bisection (a few steps per bucket, each one
    ``delay_s`` itself, so a turn lands where ``observe`` puts it); the sum is taken
    exactly over the integers and rounded once."""
    if not occurred_ms:
        return
    ordered = sorted(occurred_ms)
    n = len(ordered)
    per_bucket = []
    within_before = 0
    for bound in histogram._upper_bounds:

        def is_within(ms: int, bound: float = bound) -> bool:
            return delay_s(now_ms, ms) <= bound

        # Delays fall along ``ordered``: the turns within ``bound`` are its tail.
        within = n - bisect_left(ordered, True, key=is_within)
        per_bucket.append(within - within_before)
        within_before = within
    ahead = bisect_left(ordered, now_ms)  # occurred before now: the positive delays
    total = (Fraction(now_ms) * ahead - sum(ordered[:ahead])) / 1000
    _add_to_buckets(histogram, per_bucket, float(total))


def _add_to_buckets(histogram: Histogram, per_bucket: list[int], total: float) -> None:
    """Counts per bucket and their sum added to ``histogram``, one ``inc`` each."""
    # prometheus-client has no batch API: its own fields, held to observe() by the tests.
    histogram._raise_if_not_observable()  # type: ignore[no-untyped-call]  # as observe()
    histogram._sum.inc(total)
    buckets = histogram._buckets
    for i, n in enumerate(per_bucket):
        if n:
            buckets[i].inc(n)


_PATHS = frozenset(p.value for p in TurnPath)
_POLICIES = frozenset(p.value for p in OutputPolicy)
_TIERS = frozenset(t.value for t in RiskTier)
_VERDICTS = frozenset(v.value for v in Verdict)


class VerdictMetricsSink(Sink):
    """Counts each turn once; redeliveries the runtime recognised are not counted again.

    A turn redriven from the dead-letter topic (``turnaudit dlq redrive``) is
    counted once too, but in the ``turnaudit_redriven_*`` counters (by pack) and
    not in the count delay: a burst of old turns leaves the live rates the alerts
    read as they were; ``verify`` adds both.
    """

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
            TURNS_TOTAL,
            "Turns counted, by pack, domain, path and writer schema version.",
            ["pack", "domain", "path", "schema_version"],
            registry=registry,
        )
        self.refused = Counter(
            REFUSED_TURNS_TOTAL,
            "Turns whose bundle says refusal_emitted.",
            ["pack", "domain"],
            registry=registry,
        )
        self.hedged = Counter(
            HEDGED_TURNS_TOTAL,
            "Turns whose bundle says hedge_injected.",
            ["pack", "domain"],
            registry=registry,
        )
        self.stub = Counter(
            STUB_TURNS_TOTAL,
            "Stub-path turns (cold start, unknown domain).",
            ["pack", "domain"],
            registry=registry,
        )
        self.action_risk = Counter(
            ACTION_RISK_TOTAL,
            "Action assessments by output policy, risk tier and action-risk verdict.",
            ["output_policy", "risk_tier", "action_risk_verdict"],
            registry=registry,
        )
        self.redriven = Counter(
            REDRIVEN_TURNS_TOTAL,
            "Turns redriven from the dead-letter topic, by pack (not in turnaudit_turns_total).",
            ["pack"],
            registry=registry,
        )
        self.redriven_refused = Counter(
            REDRIVEN_REFUSED_TURNS_TOTAL,
            "Redriven turns whose bundle says refusal_emitted.",
            ["pack"],
            registry=registry,
        )
        self.redriven_hedged = Counter(
            REDRIVEN_HEDGED_TURNS_TOTAL,
            "Redriven turns whose bundle says hedge_injected.",
            ["pack"],
            registry=registry,
        )
        self.redriven_stub = Counter(
            REDRIVEN_STUB_TURNS_TOTAL,
            "Redriven stub-path turns.",
            ["pack"],
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
        # Tally keys (raw label values) to the children they add to (both
        # tallies' keys: tuples of different lengths): a pack or
        # domain id keeps its label once given one (turnaudit.label_bounds), so
        # the closing and bounding is done once per distinct key, not per batch.
        self._resolved: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        # What ``take`` tallied since the last ``flush``: turns by raw label
        # values, and their occurred_at (epoch ms). Ints and tuples of strings:
        # nothing the cyclic collector has to trace per turn.
        self._tally: dict[tuple[Any, ...], int] = {}
        self._actions: dict[tuple[Any, ...], int] = {}  # by output policy, tier, verdict
        self._occurred: list[int] = []
        self._redriven_tally: dict[tuple[Any, ...], int] = {}  # by (pack, refused, hedged, stub)
        self._redriven_count = 0

    def take(self, turn: ConsumedTurn) -> None:
        """Tallies one turn by its raw label values (one tuple, one dict update):
        the record goes at once, and ``flush`` adds the batch with one ``inc(n)``
        per series (a counter's ``inc`` takes a lock, and most turns of a batch
        share a handful of label sets)."""
        # By event id: a restarted runtime's new turns count, a redelivery does not.
        if not turn.sequence.counts_as_turn:
            return  # already counted; the runtime counts the redelivery itself
        decoded = turn.decoded
        event = decoded.event
        bundle = event["verdicts"]
        if turn.redriven:
            self._take_redriven(event["pack_id"], bundle, event["path"])
            return
        action = event["action_assessment"]
        key = (
            event["pack_id"],
            event["domain"],
            event["path"],
            decoded.writer_version,
            bundle["refusal_emitted"],
            bundle["hedge_injected"],
        )
        tally = self._tally
        tally[key] = tally.get(key, 0) + 1
        if action is not None:  # its series has no pack or domain: a tally of its own
            verdicts = (action["output_policy"], action["risk_tier"], action["action_risk_verdict"])
            actions = self._actions
            actions[verdicts] = actions.get(verdicts, 0) + 1
        occurred = event["occurred_at"]
        self._occurred.append(occurred if type(occurred) is int else occurred_millis(occurred))

    def native_tallies(self) -> NativeTallies:
        """The tallies ``take`` adds to, for the native batch step to add its ordinary
        turns to (``TallyingSink``); ``flush`` counts both alike."""
        return NativeTallies(self._tally, self._actions, self._occurred)

    def _take_redriven(self, pack_id: str, bundle: Any, path: str) -> None:
        key = (
            pack_id,
            bool(bundle["refusal_emitted"]),
            bool(bundle["hedge_injected"]),
            path == TurnPath.STUB.value,
        )
        self._redriven_tally[key] = self._redriven_tally.get(key, 0) + 1

    def _flush_redriven(self) -> None:
        tally, self._redriven_tally = self._redriven_tally, {}
        for (pack_id, refused, hedged, stub), n in tally.items():
            pack = self._packs(pack_id)
            self._child((self.redriven, pack)).inc(n)
            for counted, metric in (
                (refused, self.redriven_refused),
                (hedged, self.redriven_hedged),
                (stub, self.redriven_stub),
            ):
                if counted:
                    self._child((metric, pack)).inc(n)
            self.counted += n

    def flush(self) -> None:
        if self._redriven_tally:
            self._flush_redriven()
        occurred = self._occurred
        if not occurred:
            return
        self._count(self._tally, self._series_of)
        self._count(self._actions, self._action_series_of)
        # Observed once the batch is counted: the delay to the moment it shows.
        # A runtime clock ahead of ours would give a negative delay: counted as none.
        observe_delays(self.delay, occurred, self._clock() * 1000)
        self.counted += len(occurred)
        self._tally, self._actions, self._occurred = {}, {}, []

    def _count(
        self,
        tally: dict[tuple[Any, ...], int],
        series_of: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    ) -> None:
        """Each series' increase for the batch, added once."""
        per_child: dict[Any, int] = {}
        resolved = self._resolved
        for raw, n in tally.items():
            children = resolved.get(raw)
            if children is None:
                if len(resolved) >= _RESOLVED_BOUND:  # new ids flooding in: start over
                    resolved.clear()
                children = resolved[raw] = series_of(raw)
            for child in children:
                per_child[child] = per_child.get(child, 0) + n
        for child, n in per_child.items():
            child.inc(n)

    def _series_of(self, raw: tuple[Any, ...]) -> tuple[Any, ...]:
        """The label children one turn tally key adds to (label values closed and bounded)."""
        pack_id, domain_id, path_id, writer_version, refused, hedged = raw
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
        return tuple(self._child(key) for key in keys)

    def _action_series_of(self, raw: tuple[Any, ...]) -> tuple[Any, ...]:
        policy, tier, verdict = raw
        return (
            self._child(
                (
                    self.action_risk,
                    closed(policy, _POLICIES),
                    closed(tier, _TIERS),
                    closed(verdict, _VERDICTS),
                )
            ),
        )

    def _child(self, key: tuple[Any, ...]) -> Any:
        """The label child of (metric, *label values)."""
        child = self._children.get(key)
        if child is None:
            metric, *values = key
            child = self._children[key] = metric.labels(*values)
        return child

    def close(self) -> None:
        """Counters live in the registry; nothing to flush."""


def verdict_metrics_service(
    settings: ServiceSettings, *, registry: CollectorRegistry, **options: Any
) -> ConsumerService:
    """The verdict metrics service on the turn-events topic."""
    return ConsumerService(
        settings, VerdictMetricsSink(settings.metrics, registry), registry=registry, **options
    )
