"""A turn's verdicts as OpenTelemetry GenAI evaluation results: OTLP log records, written
natively (native/src/verify/otlp.rs, the rule's one home; no SDK, no I/O).

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
well-formed one; it is timed at the turn's ``occurred_at``, its body is
``"<name>: <label>"``, its severity INFO and its event name ``EVENT_NAME``.

The names below are the records' contract with their readers (dashboards, the
tests); the native rule writes them.
"""

from __future__ import annotations

from typing import Final

from turnaudit._native import (
    OTLP_MAX_EXPLANATION,
    OTLP_MAX_IDS,
    OTLP_MAX_TEXT,
    otlp_turn_records,
)
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.events import occurred_millis

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

MAX_TEXT: Final = OTLP_MAX_TEXT  # characters of any string attribute (ids, names)
MAX_EXPLANATION: Final = OTLP_MAX_EXPLANATION
MAX_IDS: Final = OTLP_MAX_IDS  # violated ids named in one explanation; the rest counted


def encode_records(turn: ConsumedTurn, out: bytearray, observed_ns: int) -> int:
    """The turn's records, encoded (each a ``ScopeLogs.log_records`` entry), onto the end
    of ``out``; how many. ``observed_ns``: their observed time (epoch ns)."""
    event = turn.event
    return otlp_turn_records(
        event,
        # Epoch ms from the service decoders; a datetime from others (occurred_millis takes both).
        occurred_millis(event["occurred_at"]),
        int(turn.decoded.writer_version),
        bool(turn.sequence.redelivered),
        bool(turn.redriven),
        observed_ns,
        out,
    )
