"""Comparing a log sink's lines and a verdict-metrics scrape with the range's turns.

Pure: the lines and the page text come from ``files`` and ``scrape``.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TypedDict

from prometheus_client.parser import text_string_to_metric_families

from turnaudit.telemetry import REDRIVEN_TURN_COUNTERS, TURN_COUNTERS, TURN_LOG_EVENT
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


class CounterGapJson(TypedDict):
    pack: str
    counter: str
    counted: int
    stream: int


class MetricsJson(TypedDict):
    url: str
    counted: TurnFigures
    stream: TurnFigures
    uncounted: dict[str, int]
    baseline: bool
    disagreements: list[CounterGapJson]
    agrees: bool


@dataclass
class LogReconciliation:
    path: str
    lines: int
    distinct: int
    repeated_lines: int  # extra lines for an event id already logged (redeliveries)
    not_logged: list[str]  # turns of the range the sink did not write (the first, sorted)
    outside_range: int  # logged event ids that are not turns of this range
    not_logged_count: int = -1  # all of them (-1: as many as listed)

    def __post_init__(self) -> None:
        if self.not_logged_count < 0:
            self.not_logged_count = len(self.not_logged)

    @property
    def agrees(self) -> bool:
        return not self.not_logged_count

    def as_json(self) -> LogJson:
        return LogJson(
            path=self.path,
            lines=self.lines,
            distinct_event_ids=self.distinct,
            repeated_lines=self.repeated_lines,
            not_logged=self.not_logged_count,
            not_logged_examples=self.not_logged[:EXAMPLES],
            logged_outside_range=self.outside_range,
            agrees=self.agrees,
        )


def turn_ids(raw_lines: Iterable[bytes | str]) -> Iterator[str]:
    """The event id of each turn line (``event: turn``) of a log sink's JSON lines; other
    lines and lines that are not JSON are skipped."""
    for raw in raw_lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("event") == TURN_LOG_EVENT and "event_id" in line:
            yield str(line["event_id"])


def logged_turns(raw_lines: Iterable[bytes | str]) -> Counter[str]:
    """Turn lines of a log sink's JSON lines, by event id."""
    return Counter(turn_ids(raw_lines))


def compare_log(
    path: str, lines: int, logged: Collection[str], turns: AbstractSet[str]
) -> LogReconciliation:
    """A log sink's ``lines`` turn lines (``logged``: their distinct event ids) against the
    range's turns, one pass over each: either may be on disk, looked up one by one."""
    count = 0

    def missing() -> Iterator[str]:
        nonlocal count
        for t in turns:
            if t not in logged:
                count += 1
                yield t

    first = heapq.nsmallest(EXAMPLES, missing())  # the examples: bounded, however many
    outside = sum(1 for e in logged if e not in turns)
    return LogReconciliation(path, lines, len(logged), lines - len(logged), first, outside, count)


ByPack = dict[str, TurnFigures]
FIGURES = ("turns", "refused", "hedged", "stub")


def _zero() -> TurnFigures:
    return TurnFigures(turns=0, refused=0, hedged=0, stub=0)


def _total(by_pack: ByPack) -> TurnFigures:
    total = _zero()
    for figures in by_pack.values():
        for name in FIGURES:
            total[name] += figures[name]  # type: ignore[literal-required]  # FIGURES are its keys
    return total


@dataclass(frozen=True)
class CounterGap:
    """One pack's counter whose change over the range is not the range's count."""

    pack: str
    counter: str  # the exposed sample name, e.g. ``turnaudit_turns_total``
    counted: int
    stream: int

    def text(self) -> str:
        return (
            f"pack {self.pack}: {self.counter} rose by {self.counted} over the range, "
            f"the stream has {self.stream}"
        )

    def as_json(self) -> CounterGapJson:
        return CounterGapJson(
            pack=self.pack, counter=self.counter, counted=self.counted, stream=self.stream
        )


@dataclass
class MetricsReconciliation:
    """A verdict-metrics service's counters against the range's counts, per pack.

    ``counted`` is the counters' change over the range: the scrape at the range's end
    less the scrape at its start (``baseline``), or the scrape itself when the service
    read exactly this range since it started.
    """

    url: str
    counted_by_pack: ByPack
    expected_by_pack: ByPack
    baseline: bool = False

    @property
    def counted(self) -> TurnFigures:
        return _total(self.counted_by_pack)

    @property
    def expected(self) -> TurnFigures:
        return _total(self.expected_by_pack)

    def disagreements(self) -> list[CounterGap]:
        gaps = []
        for pack in sorted(set(self.counted_by_pack) | set(self.expected_by_pack)):
            counted = self.counted_by_pack.get(pack, _zero())
            stream = self.expected_by_pack.get(pack, _zero())
            for name in FIGURES:
                c, s = counted[name], stream[name]  # type: ignore[literal-required]  # keys: FIGURES
                if c != s:
                    gaps.append(CounterGap(pack, TURN_COUNTERS[name], c, s))
        return gaps

    @property
    def agrees(self) -> bool:
        return not self.disagreements()

    def as_json(self) -> MetricsJson:
        counted, expected = self.counted, self.expected
        return MetricsJson(
            url=self.url,
            counted=counted,
            stream=expected,
            uncounted={
                name: expected[name] - counted[name]  # type: ignore[literal-required]  # keys: FIGURES
                for name in FIGURES
            },
            baseline=self.baseline,
            disagreements=[g.as_json() for g in self.disagreements()],
            agrees=self.agrees,
        )


def metric_figures_by_pack(text: str) -> ByPack:
    """The turn counters of a ``/metrics`` page, per ``pack`` label (summed over the
    other labels; a sample without one is under ``""``); a turn redriven from the
    dead-letter topic is counted in its own counter, added to the live one's figure."""
    wanted = {
        name: figure
        for counters in (TURN_COUNTERS, REDRIVEN_TURN_COUNTERS)
        for figure, name in counters.items()
    }
    sums: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            figure = wanted.get(sample.name)
            if figure is not None:
                pack = sums.setdefault(sample.labels.get("pack", ""), dict.fromkeys(FIGURES, 0.0))
                pack[figure] += sample.value
    return {
        pack: TurnFigures(
            turns=int(f["turns"]),
            refused=int(f["refused"]),
            hedged=int(f["hedged"]),
            stub=int(f["stub"]),
        )
        for pack, f in sorted(sums.items())
    }


def counters_change(after: ByPack, before: ByPack | None) -> ByPack:
    """Each pack's counters at the range's end less at its start (a pack absent at the
    start counted 0 then); packs whose counters did not move are left out."""
    change: ByPack = {}
    for pack, figures in after.items():
        start = (before or {}).get(pack, _zero())
        moved = TurnFigures(
            turns=figures["turns"] - start["turns"],
            refused=figures["refused"] - start["refused"],
            hedged=figures["hedged"] - start["hedged"],
            stub=figures["stub"] - start["stub"],
        )
        if any(moved[name] for name in FIGURES):  # type: ignore[literal-required]  # its keys
            change[pack] = moved
    return change


def metric_totals(text: str) -> TurnFigures:
    """The turn counters of a ``/metrics`` page, summed over their labels."""
    return _total(metric_figures_by_pack(text))
