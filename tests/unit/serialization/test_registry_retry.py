"""A consumer resolving a Confluent schema id retries a transient registry error (connection
refused, 5xx) with a bounded backoff, counted, before the message is given up as
unknown_schema; a registry that answers "not found" is not asked again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from prometheus_client import CollectorRegistry

from tests.support.events import turn
from tests.support.registry_standin import FlakyRegistry
from turnaudit.consumers.runtime import ConsumedTurn, Rejection, TurnEventValidation
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.dead_letters import DeadLetterReason
from turnaudit.errors import SchemaNotFoundError
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.schema_registry import registry_client
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import (
    REGISTRY_RETRY_BACKOFF_S,
    ConfluentIdSerializer,
    TurnEventDeserializer,
)
from turnaudit.settings import KafkaSettings

CATALOG = shipped_catalog()
V4 = CATALOG.version(4)


@pytest.fixture
def flaky() -> Iterator[FlakyRegistry]:
    registry = FlakyRegistry(2, V4.schema_json)
    yield registry
    registry.server.shutdown()


def message() -> bytes:
    return ConfluentIdSerializer(V4, 31)(turn("s-reg", 0))


def decoder(url: str, slept: list[float]) -> TurnEventDeserializer:
    return TurnEventDeserializer(
        # The client's own retries off: the retries seen are the decoder's.
        CATALOG,
        registry=SchemaRegistryClient({"url": url, "max.retries": 0}),
        sleep=slept.append,
    )


def test_a_registry_that_fails_then_recovers_costs_no_dead_letter(flaky: FlakyRegistry) -> None:
    slept: list[float] = []
    decode = decoder(flaky.url, slept)
    metrics = ConsumerMetrics(CollectorRegistry())
    metrics.registry_retries.source = lambda: decode.registry_retries
    validation = TurnEventValidation(decode, metrics, max_sessions=10)
    result = validation.examine(message(), b"s-reg", "t", 0, 0)
    assert isinstance(result, ConsumedTurn)
    assert result.event["session_id"] == "s-reg"
    assert slept == list(REGISTRY_RETRY_BACKOFF_S[:2])
    assert decode.registry_retries == decode.stats().registry_retries == 2
    assert next(iter(metrics.registry_retries.collect())).samples[0].value == 2
    # Resolved once: the next message of the id asks nobody.
    assert isinstance(validation.examine(message(), b"s-reg", "t", 0, 1), ConsumedTurn)
    assert flaky.requests == 3


def test_an_outage_longer_than_the_backoff_is_unknown_schema_after_bounded_retries() -> None:
    down = FlakyRegistry(100, V4.schema_json)
    try:
        slept: list[float] = []
        validation = TurnEventValidation(
            decoder(down.url, slept), ConsumerMetrics(CollectorRegistry()), max_sessions=10
        )
        result = validation.examine(message(), b"s-reg", "t", 0, 0)
    finally:
        down.server.shutdown()
    assert isinstance(result, Rejection)
    assert result.reason is DeadLetterReason.UNKNOWN_SCHEMA
    assert slept == list(REGISTRY_RETRY_BACKOFF_S)
    assert down.requests == len(REGISTRY_RETRY_BACKOFF_S) + 1


def test_connection_refused_is_retried() -> None:
    gone = FlakyRegistry(0, V4.schema_json)
    url = gone.url
    gone.server.shutdown()
    gone.server.server_close()
    slept: list[float] = []
    decode = decoder(url, slept)
    with pytest.raises(SchemaNotFoundError, match="after 5 attempts"):
        decode(message())
    assert decode.registry_retries == len(REGISTRY_RETRY_BACKOFF_S)


def test_a_schema_the_registry_does_not_know_is_not_retried() -> None:
    unknown = FlakyRegistry(0, V4.schema_json, known=False)
    try:
        slept: list[float] = []
        decode = decoder(unknown.url, slept)
        with pytest.raises(SchemaNotFoundError):
            decode(message())
    finally:
        unknown.server.shutdown()
    assert slept == []
    assert unknown.requests == 1


def test_a_readers_registry_client_leaves_retrying_to_the_decoder() -> None:
    """The client's own retries (3, each waiting up to 20 s) would run inside every attempt
    of the decoder's backoff, a minute a message instead of ~3.6 s: a reader's client has
    them off; the publisher's (registration at start, no backoff of its own) keeps them."""
    url = "http://127.0.0.1:9/reader-retries"
    reader = decoder_for(KafkaSettings(schema_registry_url=url), schemas_topic=False)
    assert reader._registry is not None
    assert reader._registry._rest_client.max_retries == 0  # type: ignore[attr-defined]  # the client's own
    assert registry_client(url)._rest_client.max_retries == 3  # the library's default
