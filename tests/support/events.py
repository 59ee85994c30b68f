"""TurnEvents for consumer tests: valid ones, contract-breaking ones, their wire bytes."""

from __future__ import annotations

from functools import cache
from typing import Any

from tests.support.turns import main_turn_kwargs
from turnaudit.producers.adapter import RuntimeInfo, TurnContext, TurnEventBuilder
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.verdicts import (
    ActionAssessment,
    OutputPolicy,
    RiskTier,
    SafetyVerdict,
    Verdict,
)


def builder(version: int = 2) -> TurnEventBuilder:
    return TurnEventBuilder(RuntimeInfo("test-runtime", "1.0", "i-1"), version)


def turn(
    session: str,
    sequence: int,
    *,
    version: int = 2,
    pack: str = "medical",
    **over: Any,
) -> dict[str, Any]:
    """A valid main-path turn, sequenced as the publisher would."""
    kwargs = main_turn_kwargs(**over)
    event: dict[str, Any] = builder(version).main_turn(
        TurnContext(session, pack, "triage", sequence), **kwargs
    )
    event["event_id"] = f"{session}-{sequence}"
    event["sequence"] = sequence
    return event


def encode(event: dict[str, Any]) -> bytes:
    return _serializer(event["verdicts"]["schema_version"])(event)


@cache
def _serializer(version: int) -> SingleObjectSerializer:
    """One per shipped version (compiling the native encoder is most of a small encode)."""
    return SingleObjectSerializer(shipped_catalog().version(version))


def breaking_events() -> dict[str, dict[str, Any]]:
    """One valid-Avro event per contract 1-4, keyed by the DLQ reason it must get."""
    both = turn(
        "breach-1",
        0,
        refusal_emitted=True,
        surface="I may be wrong, but no.",
        surface_before_hedge="[refusal] no.",
    )
    stub = builder().stub_turn(
        TurnContext("breach-2", "medical", "triage", 0),
        input_tokens=["x"],
        versor_condition=1.0,
        safety_verdict=SafetyVerdict(True),
        ethics_verdict=None,
    )
    assert stub is not None
    stub.update(event_id="breach-2-0", sequence=0, vault_hits=4)
    policy = turn(
        "breach-3",
        0,
        action=ActionAssessment.from_critic("deploy", Verdict.VOID, RiskTier.CRITICAL, False),
    )
    policy["action_assessment"]["output_policy"] = OutputPolicy.DOMAIN_SEAL.value
    fields = turn("breach-4", 0, version=1)
    fields["safety_verdict"] = {"passed": False, "violated_boundary_ids": ["weapons"]}
    return {
        "contract:refusal_hedge_exclusive": both,
        "contract:stub_fields": stub,
        "contract:output_policy_derived": policy,
        "contract:bundle_matches_fields": fields,
    }


def task_turn(session: str, task_id: str, step: int, *, last: int, **over: Any) -> dict[str, Any]:
    """Turn ``step`` of a code-fix task whose step ``last`` ends it (sequence = step)."""
    event = turn(session, step, **over)
    event["task"] = {
        "task_id": task_id,
        "task_family": "code-fix",
        "step": step,
        "end_of_task": step == last,
    }
    return event
