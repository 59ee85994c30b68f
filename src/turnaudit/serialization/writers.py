"""The TurnEvent writers a publisher encodes with: one per shipped version.

Without a schema registry each version is written in the single-object
framing (the schemas go to the compacted schemas topic, announced by the
publisher). With one, each version's id is registered (or, without
auto-registration, looked up) once, here, when the publisher is built: the
turn's path never calls the registry, and a registry that is away fails the
publisher's construction, before any turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from turnaudit.errors import RegistryUnavailableError, SerializationError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.serialization.registry import ensure_compatibility
from turnaudit.serialization.schemas import SchemaCatalog
from turnaudit.serialization.wire import (
    ConfluentIdSerializer,
    SingleObjectSerializer,
    registry_client,
)
from turnaudit.settings import KafkaSettings

# The registry client type, for callers that hand one in (tests, a runtime's own).
RegistryClient = SchemaRegistryClient
Writer = Callable[[Any], bytes]


class TurnEventWriters:
    """``writers(event) -> bytes``: the event encoded with the version its bundle names,
    so a runtime can move from one version to the next gradually."""

    def __init__(self, by_version: Mapping[int, Writer], *, registered: bool) -> None:
        self._by_version = dict(by_version)
        self.registered = registered  # Confluent framing, ids from a registry

    def __call__(self, event: OutgoingTurnEvent) -> bytes:
        version = event["verdicts"]["schema_version"]
        try:
            writer = self._by_version[version]
        except KeyError:
            raise SerializationError(f"no shipped TurnEvent schema version {version}") from None
        return writer(event)


def turn_event_writers(
    settings: KafkaSettings,
    catalog: SchemaCatalog,
    topic: str,
    schema_registry: RegistryClient | None = None,
) -> TurnEventWriters:
    """The writers for every version of ``catalog`` (see the module docstring)."""
    url = settings.schema_registry_url
    registry = schema_registry or (
        registry_client(url, settings.schema_registry_options) if url else None
    )
    if registry is None:
        return TurnEventWriters(
            {s.version: SingleObjectSerializer(s) for s in catalog.versions}, registered=False
        )
    subject = f"{topic}-value"  # TopicNameStrategy, as confluent-kafka's own
    out: dict[int, Writer] = {}
    auto_register = settings.schema_registry_auto_register
    for schema in catalog.versions:
        avro = Schema(schema.schema_json, "AVRO")
        schema_id: int | None
        try:
            if auto_register:
                # Once, before the subject's first registration; the client's
                # in-process mock:// registry keeps no compatibility levels.
                if not out and not (url or "").startswith("mock://"):
                    ensure_compatibility(registry, subject)
                schema_id = registry.register_schema(subject, avro)
            else:  # registered beforehand by the operator: only looked up
                schema_id = registry.lookup_schema(subject, avro).schema_id
        except Exception as exc:  # the registry client raises many unrelated types
            raise RegistryUnavailableError(
                f"schema registry {url or 'client'} did not "
                f"{'register' if auto_register else 'find'} TurnEvent "
                f"v{schema.version} under {subject}: {_one_line(exc)}"
            ) from exc
        if schema_id is None:
            raise RegistryUnavailableError(
                f"schema registry {url or 'client'} has no id for TurnEvent "
                f"v{schema.version} under {subject}"
            )
        out[schema.version] = ConfluentIdSerializer(schema, schema_id)
    return TurnEventWriters(out, registered=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
