"""A turn's verdicts as OpenTelemetry GenAI evaluation results, pure (no SDK, no I/O).

One ``EvaluationRecord`` per verdict the turn carries, each an event
``gen_ai.evaluation.result`` (OpenTelemetry GenAI semantic conventions):

| ``gen_ai.evaluation.name`` | when | ``score.value`` | ``score.label`` |
| --- | --- | --- | --- |
| ``safety`` | the bundle has a safety verdict | 1.0 passed, 0.0 not | ``pass`` / ``fail`` |
| ``ethics`` | the bundle has an ethics verdict | 1.0 passed, 0.0 not | ``pass`` / ``fail`` |
| ``refusal`` | every turn | 1.0 refused, 0.0 not | ``refused`` / ``not_refused`` |
| ``hedge`` | every turn | 1.0 hedged, 0.0 not | ``hedged`` / ``not_hedged`` |
| ``action_risk`` | the turn has an action assessment | SEAL 1, HOLD 0.5, VOID 0 | ``seal`` etc. |

``gen_ai.evaluation.explanation`` is set where there is something to say: the
violated boundary or predicate ids of a failed safety or ethics verdict, the
risk tier and output policy of an action. The model's identity comes from
TurnEvent v4 (``gen_ai.response.id``, ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.response.model``) when the turn has it; the
project's own attributes name the turn (``turnaudit.*``, below). No surface
text, token or tool argument is ever put in a record: verdicts only.

Every string is cut to ``MAX_TEXT`` characters (an explanation to
``MAX_EXPLANATION``, naming at most ``MAX_IDS`` ids), so a record's size is
bounded whatever the turn holds. The record is parented to the runtime's span
(trace id and span id from v4's ``trace_context``) when the turn has a
well-formed one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.events import TraceContext, occurred_millis

EVENT_NAME: Final = "gen_ai.evaluation.result"

# OpenTelemetry GenAI attribute names (semantic conventions, gen_ai registry).
EVALUATION_NAME: Final = "gen_ai.evaluation.name"
SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
EXPLANATION: Final = "gen_ai.evaluation.explanation"
RESPONSE_ID: Final = "gen_ai.response.id"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"

# The project's own attributes: which turn, and how it was read.
PACK: Final = "turnaudit.pack_id"
DOMAIN: Final = "turnaudit.domain"
SESSION_ID: Final = "turnaudit.session_id"
PRODUCER_ID: Final = "turnaudit.producer_id"
SEQUENCE: Final = "turnaudit.sequence"  # int: the turn's position in its stream
EVENT_ID: Final = "turnaudit.event_id"
SCHEMA_VERSION: Final = "turnaudit.schema_version"  # int: the writer's schema version
REDELIVERED: Final = "turnaudit.redelivered"  # bool: this turn was handed over before
REDRIVEN: Final = "turnaudit.redriven"  # bool: written back from the dead-letter topic
RISK_TIER: Final = "turnaudit.action.risk_tier"  # action_risk only
OUTPUT_POLICY: Final = "turnaudit.action.output_policy"  # action_risk only
HUMAN_DECISION: Final = "turnaudit.action.human_decision_required"  # bool, action_risk only

SAFETY, ETHICS, REFUSAL, HEDGE, ACTION_RISK = (
    "safety",
    "ethics",
    "refusal",
    "hedge",
    "action_risk",
)
EVALUATION_NAMES: Final = frozenset({SAFETY, ETHICS, REFUSAL, HEDGE, ACTION_RISK})

MAX_TEXT: Final = 256  # characters of any string attribute (ids, names)
MAX_EXPLANATION: Final = 512
MAX_IDS: Final = 8  # violated ids named in one explanation; the rest counted

_ACTION_SCORES: Final = {"SEAL": 1.0, "HOLD": 0.5, "VOID": 0.0}
_HEX: Final = frozenset("0123456789abcdef")

AttributeValue = str | bool | int | float


@dataclass(frozen=True, slots=True)
class SpanParent:
    """The runtime's span a record belongs to (W3C ids as integers)."""

    trace_id: int
    span_id: int
    trace_flags: int


@dataclass(frozen=True, slots=True)
class EvaluationRecord:
    """One ``gen_ai.evaluation.result`` log record, before the SDK sees it."""

    attributes: Mapping[str, AttributeValue]
    timestamp_ns: int  # the turn's occurred_at
    parent: SpanParent | None  # None: the turn named no (well-formed) span
    body: str  # "<name>: <label>", for readers that show bodies only

    @property
    def name(self) -> str:
        return str(self.attributes[EVALUATION_NAME])


def span_parent(trace_context: TraceContext | None) -> SpanParent | None:
    """The span of v4's ``trace_context``; None when absent, malformed or all zero."""
    if trace_context is None:
        return None
    trace_id, span_id = trace_context["trace_id"], trace_context["span_id"]
    if not (_hex_id(trace_id, 32) and _hex_id(span_id, 16)):
        return None
    return SpanParent(int(trace_id, 16), int(span_id, 16), trace_context["trace_flags"] & 0xFF)


def _hex_id(value: str, digits: int) -> bool:
    return len(value) == digits and set(value) <= _HEX and value != "0" * digits


def _text(value: str) -> str:
    return value[:MAX_TEXT]


def _named(what: str, ids: Sequence[str]) -> str:
    shown = ", ".join(_text(i) for i in ids[:MAX_IDS])
    more = f" and {len(ids) - MAX_IDS} more" if len(ids) > MAX_IDS else ""
    return f"{what}: {shown}{more}"[:MAX_EXPLANATION]


def turn_attributes(turn: ConsumedTurn) -> dict[str, AttributeValue]:
    """What every record of the turn carries: the turn, its model, how it was read."""
    event = turn.event
    attributes: dict[str, AttributeValue] = {
        PACK: _text(event["pack_id"]),
        DOMAIN: _text(event["domain"]),
        SESSION_ID: _text(event["session_id"]),
        EVENT_ID: _text(event["event_id"]),
        SCHEMA_VERSION: int(turn.decoded.writer_version),
        REDELIVERED: bool(turn.sequence.redelivered),
        REDRIVEN: bool(turn.redriven),
    }
    # v1/v2 records carry no stream identity (read with an empty producer id).
    producer_id = event["producer_id"]
    if producer_id:
        attributes[PRODUCER_ID] = _text(producer_id)
        attributes[SEQUENCE] = int(event["sequence"])
    response_id = event["response_id"]
    if response_id:
        attributes[RESPONSE_ID] = _text(response_id)
    model = event["model"]
    if model is not None:
        attributes[PROVIDER_NAME] = _text(model["provider"])
        attributes[REQUEST_MODEL] = _text(model["request_model"])
        response_model = model["response_model"]
        if response_model:
            attributes[RESPONSE_MODEL] = _text(response_model)
    return attributes


def evaluation_records(turn: ConsumedTurn) -> list[EvaluationRecord]:
    """The turn's verdicts, one record each, in the order of the table above."""
    event = turn.event
    common = turn_attributes(turn)
    # Epoch ms from the service decoders; a datetime from others (occurred_millis takes both).
    timestamp_ns = occurred_millis(event["occurred_at"]) * 1_000_000
    parent = span_parent(event["trace_context"])
    bundle = event["verdicts"]
    found: list[tuple[str, float, str, str | None, dict[str, AttributeValue]]] = []
    safety = bundle["safety_verdict"]
    if safety is not None:
        passed = bool(safety["passed"])
        found.append(
            (
                SAFETY,
                float(passed),
                "pass" if passed else "fail",
                None
                if passed or not safety["violated_boundary_ids"]
                else _named("violated boundaries", safety["violated_boundary_ids"]),
                {},
            )
        )
    ethics = bundle["ethics_verdict"]
    if ethics is not None:
        passed = bool(ethics["passed"])
        found.append(
            (
                ETHICS,
                float(passed),
                "pass" if passed else "fail",
                None
                if passed or not ethics["violated_predicate_ids"]
                else _named("violated predicates", ethics["violated_predicate_ids"]),
                {},
            )
        )
    refused = bool(bundle["refusal_emitted"])
    found.append((REFUSAL, float(refused), "refused" if refused else "not_refused", None, {}))
    hedged = bool(bundle["hedge_injected"])
    found.append((HEDGE, float(hedged), "hedged" if hedged else "not_hedged", None, {}))
    action = event["action_assessment"]
    if action is not None:
        verdict = str(action["action_risk_verdict"])
        tier, policy = str(action["risk_tier"]), str(action["output_policy"])
        human = bool(action["human_decision_required"])
        why = f"risk tier {tier}, output policy {policy}" + (
            ", human decision required" if human else ""
        )
        found.append(
            (
                ACTION_RISK,
                _ACTION_SCORES.get(verdict, 0.0),
                _text(verdict.lower()),
                _text(why),
                {RISK_TIER: _text(tier), OUTPUT_POLICY: _text(policy), HUMAN_DECISION: human},
            )
        )
    records = []
    for name, value, label, explanation, own in found:
        attributes: dict[str, AttributeValue] = {
            EVALUATION_NAME: name,
            SCORE_VALUE: value,
            SCORE_LABEL: label,
        }
        if explanation is not None:
            attributes[EXPLANATION] = explanation
        attributes.update(own)
        attributes.update(common)
        records.append(EvaluationRecord(attributes, timestamp_ns, parent, f"{name}: {label}"))
    return records
