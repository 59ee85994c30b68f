"""The one set of main-turn values the tests build valid turns from."""

from __future__ import annotations

from typing import Any

from turnaudit.verdicts import EthicsVerdict, IdentityScore, SafetyVerdict


def main_turn_kwargs(**over: Any) -> dict[str, Any]:
    """Keyword arguments of ``TurnEventBuilder.main_turn`` for a calm, valid turn."""
    kwargs: dict[str, Any] = {
        "input_tokens": ["how", "much", "ibuprofen"],
        "walk_surface": "walk:triage",
        "articulation_surface": "Take 200mg.",
        "surface_before_hedge": "Take 200mg.",
        "surface": "Take 200mg.",
        "identity_score": IdentityScore(0.8, 0.5),
        "cycle_cost_total": 12.5,
        "vault_hits": 3,
        "versor_condition": 1.7,
        "flagged": False,
        "safety_verdict": SafetyVerdict(True),
        "ethics_verdict": EthicsVerdict(True),
        "refusal_emitted": False,
    }
    kwargs.update(over)
    return kwargs
