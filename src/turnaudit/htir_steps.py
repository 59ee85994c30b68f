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


_ACTION_FIELDS = (
    "execution_verdict",
    "action_risk_verdict",
    "risk_tier",
    "human_decision_required",
    "output_policy",
)


def turn_steps(
    event: Mapping[str, Any],
    contract_breaches: Sequence[str] = (),
    redaction: Redaction = DROPPED,
) -> list[HtirStep]:
    """The HTIR steps of one TurnEvent (without indices): its tool calls, then the turn;
    surface and tool I/O as ``redaction`` lets them through (dropped by default).

    The flat shape: a field the turn has no value for is left out. Built field by
    field in one fixed order (the manifest writes the steps as they are); only the
    fields the schema lets be null, or the policy drops, are ever left out.
    """
    task = event["task"]
    event_id = event["event_id"]
    task_step = task["step"]
    millis = occurred_millis(event["occurred_at"])
    steps: list[HtirStep] = []
    tools = event.get("tool_steps")
    if tools:
        text = redaction.text
        for t in tools:
            tool: HtirStep = {
                "kind": "tool",
                "event_id": event_id,
                "task_step": task_step,
                "occurred_at": millis,
                "name": t["name"],
            }
            if (arguments := text(t["arguments"])) is not None:
                tool["arguments"] = arguments
            if (result := text(t["result"])) is not None:
                tool["result"] = result
            tool["ok"] = t["ok"]
            steps.append(tool)
    bundle = event["verdicts"]
    identity = bundle["identity_score"]
    safety, ethics = bundle["safety_verdict"], bundle["ethics_verdict"]
    action = event["action_assessment"]
    turn: HtirStep = {
        "kind": "turn",
        "event_id": event_id,
        "task_step": task_step,
        "occurred_at": millis,
        "sequence": event["sequence"],
        "turn": event["turn"],
        "path": event["path"],
        "refusal_emitted": bundle["refusal_emitted"],
        "hedge_injected": bundle["hedge_injected"],
    }
    if identity is not None:
        turn["identity_score"] = identity["score"]
        turn["identity_threshold"] = identity["threshold"]
    if safety is not None:
        turn["safety_passed"] = safety["passed"]
    if ethics is not None:
        turn["ethics_passed"] = ethics["passed"]
    turn["violated_boundary_ids"] = [] if safety is None else list(safety["violated_boundary_ids"])
    turn["violated_predicate_ids"] = (
        [] if ethics is None else list(ethics["violated_predicate_ids"])
    )
    if action is not None:
        turn["action"] = cast(StepAction, {k: action[k] for k in _ACTION_FIELDS})
    turn["contract_breaches"] = list(contract_breaches)
    if (surface := _surface(event["surface"], redaction)) is not None:
        turn["surface"] = surface
    steps.append(turn)
    return steps


def _surface(text: str, redaction: Redaction) -> str | None:
    # Kept: the gist; hashed: the whole text, so it compares with the log sink's hash.
    if redaction.policy is SurfacePolicy.KEEP:
        return text[:SURFACE_LIMIT]
    return redaction.text(text)
