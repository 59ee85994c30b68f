"""The one way to build a reader for the project's topics.

Every reader (the services, ``turnaudit tail``, the auditor worker, the demo)
gets the same decoder: the shipped versions, the compacted schemas topic for
fingerprints it does not ship, and the Schema Registry when one is configured,
so every one of them reads both framings.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from turnaudit.kafka.schema_registry import READER_OPTIONS, registry_client
from turnaudit.kafka.schema_topic import SchemaTopicResolver
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings


def decoder_for(
    kafka: KafkaSettings,
    record: str = "turn_event",
    *,
    registry: CollectorRegistry | None = None,
    schemas_topic: bool = True,
) -> TurnEventDeserializer:
    """A decoder of ``record`` messages in either framing and any known version.

    ``registry`` receives the schemas topic's unusable-record counter;
    ``schemas_topic=False`` keeps to the shipped versions (and the registry),
    for readers of records the schemas topic does not carry.
    """
    return TurnEventDeserializer(
        shipped_catalog(record),
        registry=registry_client(
            kafka.schema_registry_url, {**READER_OPTIONS, **kafka.schema_registry_options}
        )
        if kafka.schema_registry_url
        else None,
        resolver=SchemaTopicResolver(kafka, registry=registry) if schemas_topic else None,
    )
