"""Contracts 1-4 are one rule, the crate's (``CONTRACT_RULE``), which ``check_event`` and
verify's native step both call: its details word for word, its answer the same for an
event of plain dicts, of another ``Mapping`` type and of enum members, and ``KeyError``
for a field it reads that is not there. (Verify's scanned records against decoded ones:
``tests/unit/verify/test_native_step.py``.)"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.contracts import CONTRACT_RULE, Breach, Contract, check_event
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.verdicts import OutputPolicy, RiskTier, Verdict

POOL = [copy.deepcopy(e) for e in TurnRuntimeSimulator(5, schema_versions=(1, 2, 3, 4)).events(400)]


def first(stub: bool = False, action: bool = False) -> dict[str, Any]:
    for event in POOL:
        if (event["path"] == "STUB") == stub and (event["action_assessment"] is not None) == action:
            return copy.deepcopy(event)
    raise AssertionError("no such event in the pool")


class Frozen(Mapping[str, Any]):
    """A read-only mapping that is not a dict (the rule's non-dict path)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = {k: Frozen(v) if isinstance(v, dict) else v for k, v in data.items()}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return dict(self) == (dict(other) if isinstance(other, Mapping) else other)

    __hash__ = None  # type: ignore[assignment]  # a mapping is unhashable, as dict is


def test_check_event_is_the_rule() -> None:
    event = first(action=True)
    event["action_assessment"]["output_policy"] = "nonsense"
    assert check_event(event) == CONTRACT_RULE(event) != []


def test_every_stub_field_wrong_is_named_in_the_rules_order() -> None:
    event = first(stub=True)
    event["verdicts"].update(hedge_injected=True, identity_score={"score": 1.0, "threshold": 0.5})
    event.update(
        identity_score={"score": 1.0, "threshold": 0.5},
        cycle_cost_total=1.0,
        vault_hits=1,
        flagged=True,
        input_tokens=0,
        walk_surface="x",
        articulation_surface="y",
        surface="z",
    )
    assert Breach(
        Contract.STUB_FIELDS,
        "stub turn with hedge_injected, identity_score, bundle.identity_score, cycle_cost_total,"
        " vault_hits, flagged, input_tokens, walk_surface, articulation_surface, surface",
    ) in check_event(event)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"injection_detected": True},
            [
                Breach(
                    Contract.VERDICT_SPLIT_PATHS,
                    "injection detected but verdicts are SEAL/SEAL, not VOID/VOID",
                ),
            ],
        ),
        (
            {"critic_available": False},
            [
                Breach(
                    Contract.VERDICT_SPLIT_PATHS,
                    "critic unavailable but verdicts are SEAL/SEAL, not HOLD/HOLD",
                ),
            ],
        ),
        (
            {"risk_tier": RiskTier.CRITICAL},
            [
                Breach(
                    Contract.OUTPUT_POLICY_DERIVED,
                    "output_policy DOMAIN_SEAL but the rule gives DOMAIN_VOID",
                ),
            ],
        ),
        (
            {"human_decision_required": True, "injection_detected": True},
            [
                Breach(
                    Contract.VERDICT_SPLIT_PATHS,
                    "injection detected but verdicts are SEAL/SEAL, not VOID/VOID",
                ),
                Breach(
                    Contract.OUTPUT_POLICY_DERIVED,
                    "output_policy DOMAIN_SEAL but the rule gives DOMAIN_HOLD",
                ),
            ],
        ),
    ],
)
def test_an_action_assessments_breaches_word_for_word(
    change: dict[str, Any], expected: list[Breach]
) -> None:
    event = first(action=True)
    event["action_assessment"].update(
        risk_tier="LOW",
        action_risk_verdict=Verdict.SEAL,
        execution_verdict="SEAL",
        human_decision_required=False,
        output_policy=OutputPolicy.DOMAIN_SEAL,
        injection_detected=False,
        critic_available=True,
    )
    assert check_event(event) == []
    event["action_assessment"].update(change)
    assert check_event(event) == expected


def test_a_bundle_mismatch_names_each_field_once_in_order() -> None:
    event = next(copy.deepcopy(e) for e in POOL if e["verdicts"]["schema_version"] != 2)
    event["safety_verdict"] = {"passed": False, "violated_boundary_ids": ["x"]}
    event["identity_score"] = {"score": 0.0, "threshold": 0.5}
    assert check_event(event)[-1] == Breach(
        Contract.BUNDLE_MATCHES_FIELDS, "bundle differs from identity_score, safety_verdict"
    )


FIELDS = [
    ("verdicts", "refusal_emitted"),
    ("verdicts", "hedge_injected"),
    ("verdicts", "identity_score"),
    ("verdicts", "schema_version"),
    (None, "path"),
    (None, "identity_score"),
    (None, "cycle_cost_total"),
    (None, "vault_hits"),
    (None, "flagged"),
    (None, "input_tokens"),
    (None, "surface"),
    ("action_assessment", "risk_tier"),
    ("action_assessment", "output_policy"),
    ("action_assessment", "injection_detected"),
    ("action_assessment", "critic_available"),
]
VALUES = st.sampled_from(
    [
        *(True, False, None, 0, 0.0, 1, 2, "", "STUB", "FULL", "VOID", "HOLD", "SEAL", "RED"),
        *("LOW", "DOMAIN_SEAL", "DOMAIN_HOLD", "DOMAIN_VOID", "[unknown-domain]"),
    ]
)


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    event = copy.deepcopy(draw(st.sampled_from(POOL)))
    for _ in range(draw(st.integers(0, 4))):
        parent, name = draw(st.sampled_from(FIELDS))
        target = event if parent is None else event.get(parent)
        if isinstance(target, dict):
            target[name] = draw(VALUES)
    return event


def outcome(event: Mapping[str, Any]) -> list[Breach] | str:
    try:
        return check_event(event)
    except Exception as e:  # the kind of failure is the answer compared
        return type(e).__name__


@given(mutated_events())
@settings(max_examples=400)
def test_any_mapping_gets_the_answer_its_dict_gets(event: dict[str, Any]) -> None:
    assert outcome(Frozen(event)) == outcome(event)


@given(mutated_events())
@settings(max_examples=300)
def test_enum_members_and_their_plain_strings_are_judged_alike(event: dict[str, Any]) -> None:
    members = {m.value: m for kind in (Verdict, RiskTier, OutputPolicy) for m in kind}
    typed = copy.deepcopy(event)
    for part in (typed, typed["verdicts"], typed.get("action_assessment") or {}):
        for k, v in part.items():
            if isinstance(v, str) and v in members:
                part[k] = members[v]
    assert outcome(typed) == outcome(event)


@pytest.mark.parametrize(("parent", "name"), [f for f in FIELDS if f[1] != "critic_available"])
def test_a_field_the_rule_reads_missing_raises_key_error(parent: str | None, name: str) -> None:
    event = first(stub=True, action=False) if parent is None else first(action=True)
    event["path"] = "STUB"
    event["verdicts"]["refusal_emitted"] = True
    target = event if parent is None else event[parent]
    del target[name]
    if name in ("injection_detected",) or (parent is None and name == "surface"):
        check_event(event)  # optional (a default) or not read when refused
        return
    with pytest.raises(KeyError, match=name):
        check_event(event)
