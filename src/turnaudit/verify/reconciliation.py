"""Comparing a log sink's lines and a verdict-metrics scrape with the range's turns.

Pure: the lines and the page text come from ``files`` and ``scrape``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from prometheus_client.parser import text_string_to_metric_families

from turnaudit.telemetry import TURN_COUNTERS, TURN_LOG_EVENT
from turnaudit.verify.counts import TurnFigures
from turnaudit.verify.findings import EXAMPLES


class LogJson(TypedDict):
    path: str
    lines: int
    distinct_event_ids: int
    repeated_lines: int
    not_logged: int
    not_logged_examples: list[str]
    logged_outside_range: int
    agrees: bool


class MetricsJson(TypedDict):
    url: str
    counted: TurnFigures
    stream: TurnFigures
    uncounted: dict[str, int]
    agrees: bool


@dataclass
class LogReconciliation:
    path: str
    lines: int
    distinct: int
    repeated_lines: int  # extra lines for an event id already logged (redeliveries)
    not_logged: list[str]  # turns of the range the sink did not write
    outside_range: int  # logged event ids that are not turns of this range

    @property
    def agrees(self) -> bool:
        return not self.not_logged

    def as_json(self) -> LogJson:
        return LogJson(
            path=self.path, lines=self.lines, distinct_event_ids=self.distinct,
            repeated_lines=self.repeated_lines, not_logged=len(self.not_logged),
            not_logged_examples=self.not_logged[:EXAMPLES],
            logged_outside_range=self.outside_range, agrees=self.agrees,
        )


def logged_turns(raw_lines: Iterable[bytes | str]) -> Counter[str]:
    """Turn lines (``event: turn``) of a log sink's JSON lines, by event id; other lines
    and lines that are not JSON are skipped."""
    counts: Counter[str] = Counter()
    for raw in raw_lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("event") == TURN_LOG_EVENT and "event_id" in line:
            counts[str(line["event_id"])] += 1
    return counts


def compare_log(path: str, logged: Counter[str], turns: set[str]) -> LogReconciliation:
    """A log sink's turn lines by event id against the range's turns."""
    lines = logged.total()
    seen = set(logged)
    return LogReconciliation(
        path, lines, len(seen), lines - len(seen), sorted(turns - seen), len(seen - turns))


@dataclass
class MetricsReconciliation:
    url: str
    counted: TurnFigures
    expected: TurnFigures

    @property
    def agrees(self) -> bool:
        return self.counted == self.expected

    def as_json(self) -> MetricsJson:
        counted, expected = self.counted, self.expected
        return MetricsJson(
            url=self.url, counted=counted, stream=expected,
            uncounted={"turns": expected["turns"] - counted["turns"],
                       "refused": expected["refused"] - counted["refused"],
                       "hedged": expected["hedged"] - counted["hedged"],
                       "stub": expected["stub"] - counted["stub"]},
            agrees=self.agrees,
        )


def metric_totals(text: str) -> TurnFigures:
    """The turn counters of a ``/metrics`` page, summed over their labels."""
    totals = dict.fromkeys(TURN_COUNTERS, 0.0)
    wanted = {name: figure for figure, name in TURN_COUNTERS.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[wanted[sample.name]] += sample.value
    return TurnFigures(turns=int(totals["turns"]), refused=int(totals["refused"]),
                       hedged=int(totals["hedged"]), stub=int(totals["stub"]))
