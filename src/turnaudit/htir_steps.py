"""The steps of an HTIR trace, made from one turn: the tool calls the runtime reported,
then the turn itself, in the flat shape the auditors read (``None`` fields left out).

A step's surface and a tool step's arguments and result go through the surface
policy (``turnaudit.redaction``) as the step is made: dropped (left out, the
default), keyed hashes (of the whole surface) or kept (the surface cut at
``SURFACE_LIMIT``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Required, TypedDict, cast

from turnaudit.events import occurred_millis
from turnaudit.redaction import DROPPED, Redaction, SurfacePolicy

SURFACE_LIMIT = 500  # surfaces are sensitive and long; the auditors need the gist


class StepAction(TypedDict):
    """A turn step's action assessment: the verdicts, without the reasons."""

    execution_verdict: str
    action_risk_verdict: str
    risk_tier: str
    human_decision_required: bool
    output_policy: str


class HtirStep(TypedDict, total=False):
    """One step of a trace, the flat shape the auditors read: a tool call (``name``,
    ``arguments``, ``result``, ``ok``) or a turn (its verdicts); ``None`` fields left out."""

    index: int  # set when the step joins a trace
    kind: Required[str]  # "tool" or "turn"
    event_id: Required[str]
    task_step: Required[int]
    occurred_at: Required[int]
    sequence: int
    turn: int
    path: str
    refusal_emitted: bool
    hedge_injected: bool
    identity_score: float
    identity_threshold: float
    safety_passed: bool
    ethics_passed: bool
    violated_boundary_ids: list[str]
    violated_predicate_ids: list[str]
    action: StepAction
    contract_breaches: list[str]
    surface: str
    name: str
    arguments: str
    result: str
    ok: bool



STEP_FIELDS = (  # an Avro step record's fields, in its order
    "sequence",
    "turn",
    "path",
    "refusal_emitted",
    "hedge_injected",
    "identity_score",
    "identity_threshold",
    "safety_passed",
    "ethics_passed",
    "action",
    "surface",
    "name",
    "arguments",
    "result",
    "ok",
)


def turn_steps(
    event: Mapping[str, Any],
    contract_breaches: Sequence[str] = (),
    redaction: Redaction = DROPPED,
) -> list[HtirStep]:
    """The HTIR steps of one TurnEvent (without indices): its tool calls, then the turn;
    surface and tool I/O as ``redaction`` lets them through (dropped by default)."""
    task = event["task"]
    millis = occurred_millis(event["occurred_at"])
    common = {"event_id": event["event_id"], "task_step": task["step"], "occurred_at": millis}
    steps: list[dict[str, object]] = [
        {
            "kind": "tool",
            **common,
            "name": t["name"],
            "arguments": redaction.text(t["arguments"]),
            "result": redaction.text(t["result"]),
            "ok": t["ok"],
        }
        for t in event.get("tool_steps", ())
    ]
    bundle = event["verdicts"]
    identity = bundle["identity_score"]
    safety, ethics = bundle["safety_verdict"], bundle["ethics_verdict"]
    action = event["action_assessment"]
    steps.append(
        {
            "kind": "turn",
            **common,
            "sequence": event["sequence"],
            "turn": event["turn"],
            "path": event["path"],
            "refusal_emitted": bundle["refusal_emitted"],
            "hedge_injected": bundle["hedge_injected"],
            "identity_score": None if identity is None else identity["score"],
            "identity_threshold": None if identity is None else identity["threshold"],
            "safety_passed": None if safety is None else safety["passed"],
            "ethics_passed": None if ethics is None else ethics["passed"],
            "violated_boundary_ids": []
            if safety is None
            else list(safety["violated_boundary_ids"]),
            "violated_predicate_ids": []
            if ethics is None
            else list(ethics["violated_predicate_ids"]),
            "action": None
            if action is None
            else {
                k: action[k]
                for k in (
                    "execution_verdict",
                    "action_risk_verdict",
                    "risk_tier",
                    "human_decision_required",
                    "output_policy",
                )
            },
            "contract_breaches": list(contract_breaches),
            "surface": _surface(event["surface"], redaction),
        }
    )
    # The flat shape: a field the turn has no value for is left out.
    return [cast(HtirStep, {k: v for k, v in s.items() if v is not None}) for s in steps]


def _surface(text: str, redaction: Redaction) -> str | None:
    # Kept: the gist; hashed: the whole text, so it compares with the log sink's hash.
    if redaction.policy is SurfacePolicy.KEEP:
        return text[:SURFACE_LIMIT]
    return redaction.text(text)
