"""Reconciling with a verdict-metrics service: its ``/metrics`` page over HTTP."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from turnaudit.errors import ConfigurationError
from turnaudit.verify.counts import TurnCounts
from turnaudit.verify.reconciliation import (
    ByPack,
    MetricsReconciliation,
    counters_change,
    metric_figures_by_pack,
)


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
    url: str,
    counts: TurnCounts,
    text: str | None = None,
    *,
    before: str | None = None,
    settle_s: float = 0.0,
    fetch: Callable[[str], str] = scrape,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> MetricsReconciliation:
    """Compare the change of a verdict-metrics service's counters over the range with the
    range's counts, per pack.

    ``before`` is the page at the range's start (none: the service read exactly this range
    since it started); the page at its end is ``text``, else scraped from ``url``, again
    every 0.5 s up to ``settle_s`` while it disagrees (the service may still be reading
    the range's last batch; counters only rise, so a page that agrees is final)."""
    start: ByPack | None = None if before is None else metric_figures_by_pack(before)
    expected = counts.by_pack()
    deadline = clock() + settle_s
    while True:
        page = fetch(url) if text is None else text
        found = MetricsReconciliation(
            url,
            counters_change(metric_figures_by_pack(page), start),
            expected,
            baseline=before is not None,
        )
        if found.agrees or text is not None or clock() >= deadline:
            return found
        sleep(0.5)
