"""Reconciling with a verdict-metrics service: its ``/metrics`` page over HTTP."""

from __future__ import annotations

import urllib.request

from turnaudit.errors import ConfigurationError
from turnaudit.verify.counts import TurnCounts
from turnaudit.verify.reconciliation import MetricsReconciliation, metric_totals


def scrape(url: str, timeout: float = 10.0) -> str:
    """The text of a ``/metrics`` page."""
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"metrics URL {url!r} is not http(s)")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 - scheme checked above
            text: str = reply.read().decode()
    except OSError as exc:
        raise ConfigurationError(f"cannot scrape {url}: {exc}") from exc
    return text


def reconcile_metrics(
    url: str, counts: TurnCounts, text: str | None = None
) -> MetricsReconciliation:
    """Compare a verdict-metrics scrape (``text``, else scraped from ``url``) with the
    range's counts (the service must have read exactly this range since it started)."""
    page = scrape(url) if text is None else text
    return MetricsReconciliation(url, metric_totals(page), counts.figures())
