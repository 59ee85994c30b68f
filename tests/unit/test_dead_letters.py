"""The dead-letter message shape: the project's ``dlq.*`` headers and Kafka Connect's."""

from __future__ import annotations

from turnaudit.dead_letters import (
    ERROR_HEADER_BYTES,
    DeadLetterReason,
    dead_letter_headers,
    exception_class_name,
    is_dead_letter_header,
    read_dead_letter_headers,
)


def test_a_dead_letter_carries_connects_headers_beside_its_own() -> None:
    headers = dict(
        dead_letter_headers(
            reason="unknown_schema",
            error="schema id 42 is not registered",
            topic="t.turn-events",
            partition=3,
            offset=1234,
            stage="verdict-metrics/g",
        )
    )
    assert headers["__connect.errors.topic"] == b"t.turn-events"
    assert headers["__connect.errors.partition"] == b"3"
    assert headers["__connect.errors.offset"] == b"1234"
    assert headers["__connect.errors.exception.class.name"] == (
        b"turnaudit.errors.SchemaNotFoundError"
    )
    assert headers["__connect.errors.exception.message"] == b"schema id 42 is not registered"
    assert read_dead_letter_headers(list(headers.items())) == {
        "reason": "unknown_schema",
        "error": "schema id 42 is not registered",
        "topic": "t.turn-events",
        "partition": "3",
        "offset": "1234",
        "stage": "verdict-metrics/g",
    }


def test_the_message_is_bounded_and_a_missing_position_is_empty() -> None:
    headers = dict(
        dead_letter_headers(
            reason="contract:stub_fields",
            error="x" * 10_000,
            topic="t",
            partition=None,
            offset=None,
            stage="producer",
        )
    )
    assert len(headers["__connect.errors.exception.message"] or b"") == ERROR_HEADER_BYTES
    assert headers["__connect.errors.partition"] == b""
    assert headers["__connect.errors.exception.class.name"] == b"turnaudit.contracts.Breach"


def test_every_reason_names_an_exception_class() -> None:
    for reason in DeadLetterReason:
        assert exception_class_name(reason.value).startswith("turnaudit.")
    assert is_dead_letter_header("__connect.errors.topic")
    assert is_dead_letter_header("dlq.reason")
    assert not is_dead_letter_header("traceparent")
