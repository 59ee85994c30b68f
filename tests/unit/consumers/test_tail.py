"""``turnaudit tail``: one human-readable line per turn, from now or from a time, filtered."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.events import encode, turn
from turnaudit.consumers.tail import format_turn
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import (
    TurnEventDeserializer,
)
from turnaudit.verdicts import ActionAssessment, RiskTier, SafetyVerdict, Verdict

DECODE = TurnEventDeserializer(shipped_catalog())


def test_a_refused_turn_with_an_action_reads_as_one_line() -> None:
    event = turn(
        "s-1",
        4,
        refusal_emitted=True,
        surface="[refusal] no",
        surface_before_hedge="[refusal] no",
        safety_verdict=SafetyVerdict(False, ("weapons",)),
        action=ActionAssessment.from_critic("deploy", Verdict.VOID, RiskTier.RED, True),
    )
    event["occurred_at"] = int(
        datetime(2026, 11, 1, 12, 0, 1, 250000, tzinfo=UTC).timestamp() * 1000
    )
    line = format_turn(DECODE(encode(event)), 1, 42, show_verdicts=True)
    assert line == (
        "2026-11-01T12:00:01.250Z s-1#4 seq=4 MAIN medical/triage v2 | REFUSED safety=FAIL "
        "boundaries=weapons ethics=pass identity=0.80 action DOMAIN_VOID (risk VOID, tier RED, "
        "execution SEAL, human decision) [p1@42]"
    )
    assert "\n" not in line


def test_without_show_verdicts_the_line_names_the_turn_only() -> None:
    event = turn("s-2", 0, surface="I may be wrong, but ok", surface_before_hedge="ok")
    line = format_turn(DECODE(encode(event)), 0, 3, show_verdicts=False)
    assert line.endswith("s-2#0 seq=0 MAIN medical/triage v2 [p0@3]")
    assert "HEDGED" in format_turn(DECODE(encode(event)), 0, 3, show_verdicts=True)
