"""Exact counts of the distinct turns of a range, and their JSON."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

# One tally key per kind of turn: (pack, stub, refused, hedged, writer version, policy).
TurnKind = tuple[str, bool, bool, bool, int, str | None]


class TurnFigures(TypedDict):
    """The figures the verdict-metrics counters must equal."""

    turns: int
    refused: int
    hedged: int
    stub: int


class PackCounts(TypedDict):
    hedged: int
    refused: int
    stub: int
    turns: int


class CountsJson(TypedDict):
    turns: int
    main: int
    stub: int
    refused: int
    hedged: int
    by_schema_version: dict[str, int]
    action_risk_by_policy: dict[str, int]
    per_pack: dict[str, PackCounts]


@dataclass
class TurnCounts:
    """Exact counts of the distinct turns of a range.

    Each turn adds one to the tally of its kind (one dict update); the figures
    are sums over the tally, computed when asked for.
    """

    tally: dict[TurnKind, int] = field(default_factory=dict)

    def add(self, event: Mapping[str, Any], writer_version: int) -> None:
        bundle = event["verdicts"]
        action = event["action_assessment"]
        kind = (
            event["pack_id"],
            event["path"] == "STUB",
            bool(bundle["refusal_emitted"]),
            bool(bundle["hedge_injected"]),
            writer_version,
            None if action is None else action["output_policy"],
        )
        self.tally[kind] = self.tally.get(kind, 0) + 1

    def absorb(self, other: TurnCounts) -> None:
        """Another range's counts added (``verify --jobs``)."""
        for kind, n in other.tally.items():
            self.tally[kind] = self.tally.get(kind, 0) + n

    def _sum(self, position: int) -> int:
        return sum(n for kind, n in self.tally.items() if kind[position])

    @property
    def turns(self) -> int:
        return sum(self.tally.values())

    @property
    def stub(self) -> int:
        return self._sum(1)

    @property
    def main(self) -> int:
        return self.turns - self.stub

    @property
    def refused(self) -> int:
        return self._sum(2)

    @property
    def hedged(self) -> int:
        return self._sum(3)

    def figures(self) -> TurnFigures:
        return TurnFigures(
            turns=self.turns, refused=self.refused, hedged=self.hedged, stub=self.stub
        )

    def by_pack(self) -> dict[str, TurnFigures]:
        """The figures per pack, as a verdict-metrics service labels its counters."""
        return {
            pack: TurnFigures(
                turns=c["turns"], refused=c["refused"], hedged=c["hedged"], stub=c["stub"]
            )
            for pack, c in self.as_json()["per_pack"].items()
        }

    def as_json(self) -> CountsJson:
        versions: Counter[int] = Counter()
        policies: Counter[str] = Counter()
        packs: dict[str, PackCounts] = {}
        for (pack, stub, refused, hedged, version, policy), n in self.tally.items():
            versions[version] += n
            if policy is not None:
                policies[policy] += n
            counts = packs.setdefault(pack, PackCounts(hedged=0, refused=0, stub=0, turns=0))
            counts["turns"] += n
            counts["refused"] += n * refused
            counts["hedged"] += n * hedged
            counts["stub"] += n * stub
        return CountsJson(
            turns=self.turns,
            main=self.main,
            stub=self.stub,
            refused=self.refused,
            hedged=self.hedged,
            by_schema_version={str(k): v for k, v in sorted(versions.items())},
            action_risk_by_policy=dict(sorted(policies.items())),
            per_pack=dict(sorted(packs.items())),
        )
