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

from turnaudit.errors import SerializationError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.serialization.registry import RegistryClient, schema_ids
from turnaudit.serialization.schemas import SchemaCatalog
from turnaudit.serialization.wire import (
    ConfluentIdSerializer,
    SingleObjectSerializer,
    registry_client,
)
from turnaudit.settings import KafkaSettings

__all__ = ["RegistryClient", "TurnEventWriters", "turn_event_writers"]

Writer = Callable[[Any], bytes]


class TurnEventWriters:
    """``writers(event) -> bytes``: the event encoded with the version its bundle names,
    so a runtime can move from one version to the next gradually."""

    def __init__(
        self,
        by_version: Mapping[int, Writer],
        *,
        registered: bool,
        fingerprints: Mapping[int, bytes] | None = None,
    ) -> None:
        self._by_version = dict(by_version)
        self.registered = registered  # Confluent framing, ids from a registry
        # Each version's writer schema fingerprint (what signed checkpoints name).
        self.schema_fingerprints: dict[int, bytes] = {}
        # Confluent framing names no fingerprint: each version's, for the chain hash
        # (None: single-object framing, whose header names it).
        self.fingerprints = None if fingerprints is None else dict(fingerprints)

    def fingerprint_of(self, event: OutgoingTurnEvent) -> bytes | None:
        """The writer schema fingerprint a chain hash of ``event``'s bytes is to bind
        (None: the single-object header names it)."""
        if self.fingerprints is None:
            return None
        return self.fingerprints.get(event["verdicts"]["schema_version"])

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
        writers = TurnEventWriters(
            {s.version: SingleObjectSerializer(s) for s in catalog.versions}, registered=False
        )
        writers.schema_fingerprints = {s.version: s.fingerprint for s in catalog.versions}
        return writers
    ids = schema_ids(
        registry,
        f"{topic}-value",  # TopicNameStrategy, as confluent-kafka's own
        catalog.versions,
        auto_register=settings.schema_registry_auto_register,
        where=url or "client",
    )
    writers = TurnEventWriters(
        {s.version: ConfluentIdSerializer(s, ids[s.version]) for s in catalog.versions},
        registered=True,
        fingerprints={s.version: s.fingerprint for s in catalog.versions},
    )
    writers.schema_fingerprints = {s.version: s.fingerprint for s in catalog.versions}
    return writers
