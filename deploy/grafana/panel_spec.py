"""What a dashboard panel is made of (its spec, its queries) and the selectors every live
query carries; dashboard_panels.py and verify_panels.py hold the panels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DASHBOARD_UID = "turnaudit-verdicts"
# What every live query selects: a replay's series never reach a live panel or alert.
LIVE = 'job!="turnaudit-replay",replay=""'


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    id: int
    title: str
    grid: tuple[int, int, int, int]  # x, y, w, h
    unit: str
    targets: Sequence[Target]
    description: str = ""
    kind: str = "timeseries"  # or "table" (instant, one row per series), "bargauge"


def live(selector: str) -> str:
    """``{selector,LIVE}``: a panel's own matchers plus the live-only ones."""
    return "{" + (selector + "," if selector else "") + LIVE + "}"


J = live('job=~"$job"')
P = live('pack=~"$pack"')
