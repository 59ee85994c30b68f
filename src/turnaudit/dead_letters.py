"""The dead-letter topic's message shape: closed reasons, the ``dlq.*`` headers.

Beside its own ``dlq.*`` headers a dead letter carries Kafka Connect's
dead-letter headers (``__connect.errors.topic``, ``.partition``, ``.offset``,
``.exception.class.name``, ``.exception.message``), so tools built for
Connect's convention read where it came from and why.

Pure: the writer that puts dead letters on the topic is
``turnaudit.kafka.dead_letters``; readers (``verify``, the subscribers' guide)
need only this.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class DeadLetterReason(enum.StrEnum):
    UNKNOWN_FRAMING = "unknown_framing"
    UNKNOWN_SCHEMA = "unknown_schema"
    UNUSABLE_SCHEMA = "unusable_schema"  # found, but not readable into the current reader
    UNDECODABLE = "undecodable"
    CONTRACT_REFUSAL_HEDGE_EXCLUSIVE = "contract:refusal_hedge_exclusive"
    CONTRACT_STUB_FIELDS = "contract:stub_fields"
    CONTRACT_OUTPUT_POLICY_DERIVED = "contract:output_policy_derived"
    CONTRACT_BUNDLE_MATCHES_FIELDS = "contract:bundle_matches_fields"
    CONTRACT_VERDICT_SPLIT_PATHS = "contract:verdict_split_paths"
    CONTRACT_KEY_IS_SESSION_ID = "contract:key_is_session_id"


HEADER_PREFIX = "dlq."
# Set on a parked original that ``turnaudit dlq redrive`` wrote back to its topic:
# ``dlq:<partition>:<offset>`` of the letter, and ``<topic>:<partition>:<offset>``
# of the original. Consumers count a turn carrying it apart from live traffic.
REDRIVEN_FROM_HEADER = "turnaudit.redriven-from"
REDRIVEN_ORIGIN_HEADER = "turnaudit.redriven-origin"
REDRIVEN_EVENT_ID_HEADER = "turnaudit.redriven-event-id"  # the turn's event id, as decoded
CONNECT_HEADER_PREFIX = "__connect.errors."
# The reason's exception, named as Connect names the exception class of a dead letter.
_EXCEPTION_CLASSES: dict[str, str] = {
    DeadLetterReason.UNKNOWN_FRAMING.value: "turnaudit.errors.UnknownFramingError",
    DeadLetterReason.UNKNOWN_SCHEMA.value: "turnaudit.errors.SchemaNotFoundError",
    DeadLetterReason.UNUSABLE_SCHEMA.value: "turnaudit.serialization.wire.UnusableSchemaError",
    DeadLetterReason.UNDECODABLE.value: "turnaudit.errors.SerializationError",
}
ERROR_HEADER_BYTES = 4096
TRUNCATED_VALUE_BYTES = 64 * 1024
TRUNCATED_KEY_BYTES = 1024

Headers = list[tuple[str, str | bytes | None]]


def exception_class_name(reason: str) -> str:
    """The exception class a reason stands for (Connect's ``exception.class.name``)."""
    known = _EXCEPTION_CLASSES.get(reason)
    if known is not None:
        return known
    if reason.startswith("contract:"):
        return "turnaudit.contracts.Breach"
    return "turnaudit.errors.TurnAuditError"


def is_dead_letter_header(name: str) -> bool:
    """A header the dead-letter writer sets (``dlq.*`` or Connect's ``__connect.errors.*``)."""
    return name.startswith(HEADER_PREFIX) or name.startswith(CONNECT_HEADER_PREFIX)


def is_redriven(headers: object) -> bool:
    """Whether a record's raw headers (librdkafka's list or dict, or None) mark it as
    redriven from the dead-letter topic."""
    if isinstance(headers, list):
        return any(pair[0] == REDRIVEN_FROM_HEADER for pair in headers)
    if isinstance(headers, dict):
        return REDRIVEN_FROM_HEADER in headers
    return False


def dead_letter_headers(
    *,
    reason: str,
    error: str,
    topic: str,
    partition: int | None,
    offset: int | None,
    stage: str,
) -> Headers:
    """Headers of a dead-letter message: where it came from and why it is here, as
    ``dlq.*`` and as Kafka Connect's ``__connect.errors.*``."""
    message = error.encode()[:ERROR_HEADER_BYTES]
    where_partition = b"" if partition is None else str(partition).encode()
    where_offset = b"" if offset is None else str(offset).encode()
    return [
        ("dlq.reason", reason.encode()),
        ("dlq.error", message),
        ("dlq.topic", topic.encode()),
        ("dlq.partition", where_partition),
        ("dlq.offset", where_offset),
        ("dlq.stage", stage.encode()),
        (CONNECT_HEADER_PREFIX + "topic", topic.encode()),
        (CONNECT_HEADER_PREFIX + "partition", where_partition),
        (CONNECT_HEADER_PREFIX + "offset", where_offset),
        (CONNECT_HEADER_PREFIX + "exception.class.name", exception_class_name(reason).encode()),
        (CONNECT_HEADER_PREFIX + "exception.message", message),
    ]


def read_dead_letter_headers(
    headers: Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None,
) -> dict[str, str]:
    """The ``dlq.*`` headers of a message as text, without the prefix."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    return {
        name[len(HEADER_PREFIX) :]: value.decode(errors="replace")
        if isinstance(value, bytes)
        else value or ""
        for name, value in pairs
        if name.startswith(HEADER_PREFIX)
    }


@dataclass(frozen=True, slots=True)
class DeadLetterOutcome:
    """What became of one dead letter, reported once it is settled."""

    reason: str
    truncated: bool  # written, but cut down to fit
    failed: bool  # not written at all (counted, logged as critical)
