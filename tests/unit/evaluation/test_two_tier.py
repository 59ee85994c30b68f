"""The two-tier auditor on the demo's traces: the rules first, the pinned model for the rest."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.evaluation.auditors import RuleBasedAuditor, TwoTierAuditor
from turnaudit.evaluation.errors import AuditorIdentityError
from turnaudit.evaluation.files import EvidenceFile, composed_digest, parse_evidence
from turnaudit.evaluation.gate import evaluate
from turnaudit.evaluation.labels import labels_from_ground_truth
from turnaudit.evaluation.model_auditor import OllamaAuditor
from turnaudit.evaluation.trace_evidence import TraceEvidence
from turnaudit.htir import HtirTrace, TraceAssembler
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

from .builders import turn_step
from .ollama_standin import DIGEST, OTHER_DIGEST, TAG, StandInOllama, serving

DEMO_SEED = 7  # turnaudit demo's default seed


def demo_traces(events: int = 2500) -> tuple[list[HtirTrace], dict[str, Any]]:
    """The demo's traces, built in-process: simulator -> assembly -> the Avro record the
    worker reads from the traces topic."""
    sim = TurnRuntimeSimulator(DEMO_SEED)
    assembler = TraceAssembler(idle_timeout=60)
    closed = []
    for offset, event in enumerate(sim.events(events)):
        event["event_id"], event["sequence"] = f"e{offset}", offset
        trace = assembler.add(event, topic="turns", partition=0, offset=offset)
        if trace is not None:
            closed.append(trace)
    catalog = shipped_catalog("htir_trace")
    write, read = SingleObjectSerializer(catalog.latest), TurnEventDeserializer(catalog)
    traces = [HtirTrace.from_avro(read(write(t.to_avro())).event) for t in closed]
    return traces, sim.truth.as_json()


@pytest.fixture
def model() -> Iterator[tuple[StandInOllama, str]]:
    fake = StandInOllama()
    with serving(fake) as url:
        yield fake, url


def battery(
    auditor: TwoTierAuditor, traces: list[HtirTrace], truth: dict[str, Any]
) -> EvidenceFile:
    builder = TraceEvidence(auditor, labels_from_ground_truth(truth))
    builder.begin()
    for trace in traces:
        admission = builder.admit(trace)
        if admission.is_case:
            builder.add_case(trace, admission, builder.observe(trace))
    return builder.finish()


def test_a_battery_on_the_demo_traces_names_the_tier_of_every_observation(
    model: tuple[StandInOllama, str],
) -> None:
    fake, url = model
    traces, truth = demo_traces()
    auditor = TwoTierAuditor(RuleBasedAuditor(), OllamaAuditor(url, TAG, DIGEST))
    evidence = battery(auditor, traces, truth)

    observations = [o for case in evidence.cases for o in case.observations or ()]
    assert evidence.cases
    assert all(o.tier in ("rules", "model") for o in observations)
    by_tier = {tier: sum(1 for o in observations if o.tier == tier) for tier in ("rules", "model")}
    assert by_tier["rules"] > 0
    assert by_tier["model"] > 0
    # Every escalation is one model call, and nothing else reaches the model.
    assert auditor.escalations == len(fake.prompts) >= by_tier["model"]

    identity = evidence.auditor_id
    assert identity is not None
    assert [(t.tier, t.name, t.version, t.digest) for t in identity.tiers] == [
        (
            "rules",
            RuleBasedAuditor.NAME,
            RuleBasedAuditor.RULESET_VERSION,
            RuleBasedAuditor().identity.digest,
        ),
        ("model", f"ollama/{TAG}", None, f"sha256:{DIGEST}"),
    ]
    assert identity.digest == composed_digest(identity.tiers)

    report = evaluate(evidence)
    assert report["tiers"]["pinned"] == ["rules", "model"]
    assert report["tiers"]["escalations"] == by_tier["model"]
    assert {t["tier"]: t["decided"] for t in report["tiers"]["decided_by"]} == by_tier
    assert report["overall"]["observations"] == len(observations)
    assert not [
        f for f in report["failed_requirements"] if f["requirement"].startswith("integrity")
    ]


def test_the_rules_decide_alone_what_they_can_and_escalate_only_doubt(
    model: tuple[StandInOllama, str],
) -> None:
    fake, url = model
    auditor = TwoTierAuditor(RuleBasedAuditor(), OllamaAuditor(url, TAG, DIGEST))
    auditor.begin_battery()
    clean, refused = [turn_step(0)], [turn_step(0, refusal_emitted=True, hedge_injected=True)]
    hedged = [turn_step(0, hedge_injected=True)]
    assert auditor.decide(clean).tier == "rules"
    assert auditor.decide(clean).verdict == "ok"
    assert auditor.decide(refused).tier == "rules"
    assert auditor.decide(refused).verdict == "alarm"
    assert fake.prompts == []  # a rule's verdict never asks the model
    decision = auditor.decide(hedged)
    assert (decision.tier, decision.verdict, len(fake.prompts)) == ("model", "alarm", 1)
    near = [turn_step(0, identity_score=0.55, identity_threshold=0.5)]
    assert auditor.decide(near).tier == "model"


def test_a_model_re_pointed_during_the_battery_leaves_no_evidence(
    model: tuple[StandInOllama, str],
) -> None:
    fake, url = model
    fake.switch_digest_after = 1
    traces, truth = demo_traces(800)
    with pytest.raises(AuditorIdentityError, match="changed digest during the battery"):
        battery(TwoTierAuditor(RuleBasedAuditor(), OllamaAuditor(url, TAG, DIGEST)), traces, truth)


def test_a_model_not_at_its_pinned_digest_does_not_start(
    model: tuple[StandInOllama, str],
) -> None:
    _, url = model
    auditor = TwoTierAuditor(RuleBasedAuditor(), OllamaAuditor(url, TAG, OTHER_DIGEST))
    with pytest.raises(AuditorIdentityError, match="not the expected"):
        auditor.begin_battery()


@pytest.fixture(scope="module")
def two_tier_evidence() -> dict[str, Any]:
    fake = StandInOllama()
    with serving(fake) as url:
        traces, truth = demo_traces(1500)
        evidence = battery(
            TwoTierAuditor(RuleBasedAuditor(), OllamaAuditor(url, TAG, DIGEST)), traces, truth
        )
    return json.loads(json.dumps(evidence.to_json()))


CHANGES = st.sampled_from(
    [
        ("rules", "version", "3"),
        ("rules", "digest", "sha256:" + "1" * 64),
        ("model", "digest", "sha256:" + OTHER_DIGEST),
        ("model", "name", "ollama/qwen3.5:7b"),
    ]
)


@settings(max_examples=20, deadline=None)
@given(change=CHANGES, keep_digest=st.booleans())
def test_a_changed_rule_set_version_or_model_digest_is_a_hold_for_integrity(
    two_tier_evidence: dict[str, Any],
    change: tuple[str, str, str],
    keep_digest: bool,
) -> None:
    raw = copy.deepcopy(two_tier_evidence)
    tier_name, key, value = change
    tier = next(t for t in raw["auditor_id"]["tiers"] if t["tier"] == tier_name)
    tier[key] = value
    if not keep_digest:
        # Even re-composing the digest does not help: the observations' identity changed.
        raw["auditor_id"]["digest"] = "sha256:" + "2" * 64
    report = evaluate(parse_evidence(raw))
    assert report["decision"] == "hold"
    failed = [
        f for f in report["failed_requirements"] if f["requirement"] == "integrity.pinned_identity"
    ]
    assert failed
    assert failed[0]["integrity_requirement"] == "pinned identities"
    assert "auditor_id.tiers" in failed[0]["cases"]


def test_an_observation_naming_no_pinned_tier_is_a_hold(
    two_tier_evidence: dict[str, Any],
) -> None:
    raw = copy.deepcopy(two_tier_evidence)
    raw["cases"][0]["observations"][0]["tier"] = None
    report = evaluate(parse_evidence(raw))
    failed = {f["requirement"]: f for f in report["failed_requirements"]}
    assert failed["integrity.tier_attribution"]["cases"] == [raw["cases"][0]["task_id"]]


def test_the_report_says_what_a_pass_does_and_does_not_authorize(
    two_tier_evidence: dict[str, Any],
) -> None:
    scope = evaluate(parse_evidence(two_tier_evidence))["authorization"]
    assert "offline prerequisite" in scope["pass_is"]
    assert scope["pass_does_not"][0] == "enable per_turn_auditor"
    assert any("default flip" in item for item in scope["pass_does_not"])
    assert "flag-OFF/ON" in scope["still_required"]
    assert "match or beat task success" in scope["still_required"]
