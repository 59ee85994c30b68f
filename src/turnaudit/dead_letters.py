"""The dead-letter topic's message shape: closed reasons, the ``dlq.*`` headers.

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
ERROR_HEADER_BYTES = 4096
TRUNCATED_VALUE_BYTES = 64 * 1024
TRUNCATED_KEY_BYTES = 1024

Headers = list[tuple[str, str | bytes | None]]


def dead_letter_headers(
    *,
    reason: str,
    error: str,
    topic: str,
    partition: int | None,
    offset: int | None,
    stage: str,
) -> Headers:
    """Headers of a dead-letter message: where it came from and why it is here."""
    return [
        ("dlq.reason", reason.encode()),
        ("dlq.error", error.encode()[:ERROR_HEADER_BYTES]),
        ("dlq.topic", topic.encode()),
        ("dlq.partition", b"" if partition is None else str(partition).encode()),
        ("dlq.offset", b"" if offset is None else str(offset).encode()),
        ("dlq.stage", stage.encode()),
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
