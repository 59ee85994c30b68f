"""The Schema Registry client, for real deployments: registration and compatibility.

* Its options (credentials, TLS) and whether the publisher may register come
  from the settings (``KafkaSettings.schema_registry_options`` and
  ``schema_registry_auto_register``, read by ``turnaudit.registry_settings``).
* Without auto-registration the schemas were registered beforehand (by a
  pipeline with write rights); the publisher only looks them up, and never
  changes the registry.
* When it does register, the publisher first sets the subject's compatibility level
  to FULL_TRANSITIVE, the guarantee ``turnaudit schemas check`` proves for the
  shipped versions: every version reads and is read by every other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    # The registry client costs ~0.2 s to import (httpx, authlib): only a process
    # that talks to a registry pays it, when it first does.
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import SerializationContext

from turnaudit.errors import IncompatibleSchemaError, RegistryUnavailableError, SerializationError
from turnaudit.serialization.schemas import AvroRecord, WriterSchema

COMPATIBILITY = "FULL_TRANSITIVE"
HTTP_CONFLICT = 409  # a registry's answer to a schema its compatibility level refuses
# The registry client type, for callers that hand one in (tests, a runtime's own).
RegistryClient: TypeAlias = "SchemaRegistryClient"


class ConfluentSerializer:
    """Encodes records in the Confluent wire format.

    With ``auto_register`` the schema is registered under the topic's subject,
    whose compatibility level is set to FULL_TRANSITIVE first; without it the
    schema must have been registered beforehand and is only looked up.
    """

    def __init__(
        self, schema: WriterSchema, registry: RegistryClient, *, auto_register: bool = True
    ) -> None:
        self.schema = schema
        self._registry = registry
        self._auto_register = auto_register
        self._compatible_subjects: set[str] = set()
        from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: PLC0415 - lazy, see top

        self._inner = AvroSerializer(
            registry, schema.schema_json, conf={"auto.register.schemas": auto_register}
        )

    def __call__(self, record: AvroRecord, ctx: SerializationContext | None = None) -> bytes:
        ctx = ctx if ctx is not None else _value_context("")
        if self._auto_register and ctx.topic not in self._compatible_subjects:
            # Before the first registration under the subject (topic name strategy).
            ensure_compatibility(self._registry, f"{ctx.topic}-value")
            self._compatible_subjects.add(ctx.topic)
        try:
            out = self._inner(record, ctx)
        except Exception as exc:  # the registry client raises many unrelated types
            raise SerializationError(
                f"record does not fit {self.schema.name} v{self.schema.version} "
                f"or the registry refused it: {exc}"
            ) from exc
        if out is None:  # pragma: no cover - AvroSerializer returns None only for None input
            raise SerializationError("the registry serializer produced no bytes")
        return bytes(out)

    def bind(self, topic: str) -> Callable[[AvroRecord], bytes]:
        """A one-argument serializer for one topic (the context is built once)."""
        ctx = _value_context(topic)
        return lambda record: self(record, ctx)


def _value_context(topic: str) -> SerializationContext:
    from confluent_kafka.serialization import (  # noqa: PLC0415 - lazy, see top
        MessageField,
        SerializationContext,
    )

    return SerializationContext(topic, MessageField.VALUE)


def registry_client(
    url: str, extra: Mapping[str, str | int | float] | None = None
) -> RegistryClient:
    """The process's Schema Registry client for ``url`` and options (one per both, so its
    schema caches are shared); ``mock://…`` gives the library's in-process registry."""
    return _registry_client(url, tuple(sorted((extra or {}).items())))


# What a reader's client adds: its own retries off (3, waiting up to 20 s each, on every
# attempt), so the decoder's bounded backoff (``REGISTRY_RETRY_BACKOFF_S``, counted) is
# the only one a message waits out while the registry is down.
READER_OPTIONS: Mapping[str, int] = MappingProxyType({"max.retries": 0})


# Seconds one request may take. The client sets none by default (httpx without a timeout):
# a registry that takes the connection and never answers (hung, a full backlog, a stopped
# process) would hold a publisher's start or a reader's message for good.
REQUEST_TIMEOUT_S = 5


@functools.cache
def _registry_client(url: str, extra: tuple[tuple[str, str | int | float], ...]) -> RegistryClient:
    from confluent_kafka.schema_registry import (  # noqa: PLC0415 - lazy, see top
        SchemaRegistryClient,
    )

    return SchemaRegistryClient.new_client(
        {"url": url, "timeout": REQUEST_TIMEOUT_S, **dict(extra)}
    )


def ensure_compatibility(registry: SchemaRegistryClient, subject: str) -> None:
    """Set ``subject``'s compatibility level to FULL_TRANSITIVE and read it back."""
    if type(registry).__name__ == "MockSchemaRegistryClient":
        return  # the library's in-process registry keeps no compatibility levels
    try:
        registry.set_compatibility(subject_name=subject, level=COMPATIBILITY)
        level = registry.get_compatibility(subject_name=subject)
    except Exception as exc:  # the registry client raises many unrelated types
        raise SerializationError(
            f"the registry did not take compatibility {COMPATIBILITY} for {subject}: {exc}"
        ) from exc
    if str(level).upper() != COMPATIBILITY:
        raise SerializationError(
            f"the registry reports compatibility {level} for {subject}, not {COMPATIBILITY}"
        )


def schema_ids(
    registry: RegistryClient,
    subject: str,
    schemas: Sequence[WriterSchema],
    *,
    auto_register: bool,
    where: str,
) -> dict[int, int]:
    """Each schema's id under ``subject`` (by version): registered (the subject's
    compatibility set first), or, without ``auto_register``, only looked up.
    ``RegistryUnavailableError`` names the version the registry did not give;
    ``IncompatibleSchemaError`` the subject whose compatibility level refused it (HTTP 409:
    a version registered there cannot read it, or it cannot read that version)."""
    from confluent_kafka.schema_registry import Schema  # noqa: PLC0415 - lazy, see top

    out: dict[int, int] = {}
    for schema in schemas:
        avro = Schema(schema.schema_json, "AVRO")
        schema_id: int | None
        try:
            if auto_register:
                # Once, before the subject's first registration; the client's
                # in-process mock:// registry keeps no compatibility levels.
                if not out and not where.startswith("mock://"):
                    ensure_compatibility(registry, subject)
                schema_id = registry.register_schema(subject, avro)
            else:  # registered beforehand by the operator: only looked up
                schema_id = registry.lookup_schema(subject, avro).schema_id
        except Exception as exc:  # the registry client raises many unrelated types
            if getattr(exc, "http_status_code", None) == HTTP_CONFLICT:
                raise IncompatibleSchemaError(
                    f"schema registry {where} refused TurnEvent v{schema.version} under subject "
                    f"{subject}: it is incompatible with a version registered there "
                    f"(compatibility {COMPATIBILITY}); the publisher does not start: "
                    f"{_one_line(exc)}"
                ) from exc
            raise RegistryUnavailableError(
                f"schema registry {where} did not {'register' if auto_register else 'find'} "
                f"TurnEvent v{schema.version} under {subject}: {_one_line(exc)}"
            ) from exc
        if schema_id is None:
            raise RegistryUnavailableError(
                f"schema registry {where} has no id for TurnEvent v{schema.version} under {subject}"
            )
        out[schema.version] = schema_id
    return out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
