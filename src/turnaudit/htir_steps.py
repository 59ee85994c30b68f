"""The steps of an HTIR trace, made from one turn: the tool calls the runtime reported,
then the turn itself, in the flat shape the auditors read (``None`` fields left out).

A step's surface and a tool step's arguments and result go through the surface
policy (``turnaudit.redaction``) as the step is made: dropped (left out, the
default), keyed hashes (of the whole surface) or kept (the surface cut at
``SURFACE_LIMIT``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Required, TypedDict, cast

from turnaudit._native import SURFACE_LIMIT as NATIVE_SURFACE_LIMIT
from turnaudit._native import htir_turn_steps
from turnaudit.events import occurred_millis
from turnaudit.redaction import DROPPED, Redaction

# How much of a surface a trace keeps under ``keep`` (the native rule's).
SURFACE_LIMIT: int = NATIVE_SURFACE_LIMIT


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


class TaskTurn(NamedTuple):
    """A turn with a task made into its trace steps (no event kept): what the feeder's
    native step hands over for an ordinary task turn (``ConsumeStep``'s ``steps`` outlet)."""

    task_id: str
    task_family: str
    task_step: int
    end_of_task: bool
    session_id: str
    runtime: Mapping[str, str]
    event_id: str
    sequence: int
    steps: list[HtirStep]
    topic: str
    partition: int
    offset: int


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
    surface and tool I/O as ``redaction`` lets them through (dropped by default).

    The flat shape: a field the turn has no value for is left out. Built field by
    field in one fixed order (the manifest writes the steps as they are); only the
    fields the schema lets be null, or the policy drops, are ever left out. The rule is
    the native crate's (``native/src/verify/htir_steps.rs``), which the feeder's native
    step runs on the turns it scans.
    """
    steps = htir_turn_steps(
        cast(dict[str, Any], event),
        occurred_millis(event["occurred_at"]),
        contract_breaches,
        redaction.policy.value,
        redaction.text,
    )
    return cast(list[HtirStep], steps)


def task_turn(
    event: Mapping[str, Any],
    topic: str,
    partition: int,
    offset: int,
    *,
    contract_breaches: Sequence[str] = (),
    redaction: Redaction = DROPPED,
) -> TaskTurn | None:
    """A decoded turn with a task as the trace store takes it (``TaskTurn``), its steps made
    by ``turn_steps``; ``None`` for a turn without a task."""
    task = event.get("task")
    if task is None:
        return None
    return TaskTurn(
        task["task_id"],
        task["task_family"],
        task["step"],
        task["end_of_task"],
        event["session_id"],
        event["runtime"],
        event["event_id"],
        event["sequence"],
        turn_steps(event, contract_breaches, redaction),
        topic,
        partition,
        offset,
    )
