"""Bounded label sets: metric label values named after the stream, never unbounded.

A pack or domain id becomes a label value of its own when an operator listed
it (an allow-list), or, without a list, when it is among the first ``limit``
distinct ids the process has seen; every other id is ``other``. The number of
series stays bounded whatever the stream holds, and a deployment with a
normal number of packs gets every pack by name without configuring anything.

The per-value cost is one dict lookup; only an id never seen before takes the
slow path. When the bound is first reached the set says so once: a warning
log line and the ``turnaudit_metrics_label_bound_reached`` gauge.
"""

from __future__ import annotations

import structlog
from prometheus_client import CollectorRegistry, Gauge

OTHER = "other"
DEFAULT_LABEL_LIMIT = 100

log = structlog.get_logger("turnaudit.label_bounds")


class LabelBoundMetrics:
    """The gauges that show how full each bounded label set is (one family per registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.named = Gauge(
            "turnaudit_metrics_label_values",
            "Distinct values of a bounded label given their own series (the rest are 'other').",
            ["label"],
            registry=registry,
        )
        self.limit = Gauge(
            "turnaudit_metrics_label_limit",
            "How many distinct values a bounded label names before the rest become 'other' "
            "(0: an explicit allow-list decides).",
            ["label"],
            registry=registry,
        )
        self.bound_reached = Gauge(
            "turnaudit_metrics_label_bound_reached",
            "1 once a bounded label met more distinct values than its limit: later ones are "
            "counted as 'other'.",
            ["label"],
            registry=registry,
        )


class BoundedLabelSet:
    """Maps raw ids to label values: the allow-list if given, else the first ``limit`` seen."""

    def __init__(
        self,
        label: str,
        *,
        allowed: frozenset[str] = frozenset(),
        limit: int = DEFAULT_LABEL_LIMIT,
        metrics: LabelBoundMetrics | None = None,
        setting: str = "",
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit of label {label!r} must be at least 1, not {limit}")
        self.label = label
        self._allow_list = bool(allowed)
        self._limit = limit
        self._setting = setting  # named in the warning, so an operator knows what to raise
        self._names: dict[str, str] = {value: value for value in allowed}
        self.reached = False
        self._metrics = metrics
        # At start-up, say how this label is bounded: the first thing to check
        # when a series is missing or a pack shows up as "other".
        log.info(
            "metrics_label_bound",
            label=label,
            mode="allow-list" if self._allow_list else "first-seen",
            named=sorted(self._names) if self._allow_list else None,
            limit=None if self._allow_list else limit,
        )
        if metrics is not None:
            metrics.limit.labels(label).set(0 if self._allow_list else limit)
            metrics.named.labels(label).set(len(self._names))
            metrics.bound_reached.labels(label).set(0)

    @property
    def named(self) -> frozenset[str]:
        return frozenset(self._names)

    def __call__(self, value: str) -> str:
        name = self._names.get(value)
        return name if name is not None else self._admit(value)

    def _admit(self, value: str) -> str:
        if self._allow_list:
            return OTHER
        if len(self._names) < self._limit:
            self._names[value] = value
            if self._metrics is not None:
                self._metrics.named.labels(self.label).set(len(self._names))
            return value
        if not self.reached:
            self.reached = True
            if self._metrics is not None:
                self._metrics.bound_reached.labels(self.label).set(1)
            log.warning(
                "metrics_label_bound_reached",
                label=self.label,
                limit=self._limit,
                first_other=value,
                hint=f"later {self.label} ids are counted as {OTHER!r}; raise {self._setting} "
                "or list the ones to name",
            )
        return OTHER
