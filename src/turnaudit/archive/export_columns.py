"""The columns of ``turnaudit archive export --parquet``: one fixed Arrow schema for every
schema version a turn was written with (docs/archive.md, "Columns").

Not inferred per file: a file of version 1 turns and one of version 5 turns have the same
columns, so a query engine reads any number of exports as one table. The event's fields
are today's TurnEvent's (every shipped version's fields are among them); a field a turn's
version did not have is null. The record's place and broker time come first, then why it
is no turn (``error``) or its event's fields.

Surfaces and tool I/O are as the redaction policy lets them through: null when dropped,
the keyed hash under ``hash``. ``input_tokens`` is a list either way: the tokens, or one
item, the hash of them joined.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import pyarrow as pa

from turnaudit.redaction import TOKENS_FIELD

UTC_MILLIS = pa.timestamp("ms", tz="UTC")

_IDENTITY_SCORE = pa.struct([("score", pa.float64()), ("threshold", pa.float64())])
_SAFETY_VERDICT = pa.struct(
    [("passed", pa.bool_()), ("violated_boundary_ids", pa.list_(pa.string()))]
)
_ETHICS_VERDICT = pa.struct(
    [
        ("passed", pa.bool_()),
        ("violated_predicate_ids", pa.list_(pa.string())),
        ("hedge_recommended", pa.bool_()),
    ]
)

# Where the record was (never null), then why it is no turn, or its writer's version.
PLACE_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", UTC_MILLIS, nullable=False),  # the broker's time of the record
    pa.field("error", pa.string()),  # an undecodable record: what the decoder raised
    pa.field("writer_version", pa.int32()),
)

# Today's TurnEvent, field by field (schemas/turn_event.v5.avsc); enums as their names.
EVENT_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("event_id", pa.string()),
    pa.field("session_id", pa.string()),
    pa.field("sequence", pa.int64()),
    pa.field("producer_id", pa.string()),
    pa.field("prev_hash", pa.string()),
    pa.field("occurred_at", UTC_MILLIS),
    pa.field(
        "runtime",
        pa.struct([("name", pa.string()), ("version", pa.string()), ("instance_id", pa.string())]),
    ),
    pa.field("path", pa.string()),
    pa.field("pack_id", pa.string()),
    pa.field("domain", pa.string()),
    pa.field(
        "task",
        pa.struct(
            [
                ("task_id", pa.string()),
                ("task_family", pa.string()),
                ("step", pa.int32()),
                ("end_of_task", pa.bool_()),
            ]
        ),
    ),
    pa.field("turn", pa.int32()),
    pa.field("input_tokens", pa.list_(pa.string())),
    pa.field("surface", pa.string()),
    pa.field("walk_surface", pa.string()),
    pa.field("articulation_surface", pa.string()),
    pa.field("identity_score", _IDENTITY_SCORE),
    pa.field("cycle_cost_total", pa.float64()),
    pa.field("vault_hits", pa.int32()),
    pa.field("versor_condition", pa.float64()),
    pa.field("flagged", pa.bool_()),
    pa.field("safety_verdict", _SAFETY_VERDICT),
    pa.field("ethics_verdict", _ETHICS_VERDICT),
    pa.field(
        "verdicts",
        pa.struct(
            [
                ("schema_version", pa.int32()),
                ("identity_score", _IDENTITY_SCORE),
                ("safety_verdict", _SAFETY_VERDICT),
                ("ethics_verdict", _ETHICS_VERDICT),
                ("refusal_emitted", pa.bool_()),
                ("hedge_injected", pa.bool_()),
            ]
        ),
    ),
    pa.field(
        "action_assessment",
        pa.struct(
            [
                ("target", pa.string()),
                ("execution_verdict", pa.string()),
                ("action_risk_verdict", pa.string()),
                ("risk_tier", pa.string()),
                ("human_decision_required", pa.bool_()),
                ("output_policy", pa.string()),
                ("injection_detected", pa.bool_()),
                ("critic_available", pa.bool_()),
            ]
        ),
    ),
    pa.field(
        "tool_steps",
        pa.list_(
            pa.struct(
                [
                    ("name", pa.string()),
                    ("arguments", pa.string()),
                    ("result", pa.string()),
                    ("ok", pa.bool_()),
                ]
            )
        ),
    ),
    pa.field("breaches", pa.list_(pa.string())),
    pa.field(
        "trace_context",
        pa.struct(
            [("trace_id", pa.string()), ("span_id", pa.string()), ("trace_flags", pa.int32())]
        ),
    ),
    pa.field("response_id", pa.string()),
    pa.field(
        "model",
        pa.struct(
            [
                ("provider", pa.string()),
                ("request_model", pa.string()),
                ("response_model", pa.string()),
            ]
        ),
    ),
    pa.field("liveness_interval_ms", pa.int64()),
    pa.field(
        "sealed",
        pa.struct(
            [("data_key_id", pa.string()), ("nonce", pa.binary()), ("ciphertext", pa.binary())]
        ),
    ),
)

TURN_SCHEMA = pa.schema(
    [*PLACE_COLUMNS, *EVENT_COLUMNS],
    metadata={b"turnaudit.schema": b"turnaudit.archive.TurnRow/1"},
)
EVENT_FIELDS = tuple(f.name for f in EVENT_COLUMNS)


class TurnRowPlace(TypedDict):
    partition: int
    offset: int
    timestamp: int  # epoch ms
    error: str | None
    writer_version: int | None


def turn_row(place: TurnRowPlace, event: Mapping[str, Any] | None) -> dict[str, object]:
    """One row of ``TURN_SCHEMA``: the record's place and its redacted event's fields
    (``occurred_at`` in epoch ms, as decoded); every event field null for no event."""
    row: dict[str, object] = dict(place)
    for name in EVENT_FIELDS:
        row[name] = None if event is None else event.get(name)
    tokens = row[TOKENS_FIELD]
    if isinstance(tokens, str):  # hashed: one text of them all
        row[TOKENS_FIELD] = [tokens]
    return row
