"""The TurnEvent serializers: one writer schema behind a fixed framing header, Avro
single-object (``C3 01`` + fingerprint) or Confluent (``00`` + schema id)."""

from __future__ import annotations

import io
from typing import Any

import fastavro

from turnaudit.errors import SerializationError
from turnaudit.serialization.framing import confluent_header, single_object_header
from turnaudit.serialization.schemas import WriterSchema


class FramedSerializer:
    """Encodes records with one writer schema behind a fixed framing header."""

    def __init__(self, schema: WriterSchema, header: bytes) -> None:
        self.schema = schema
        self._header = header
        self._parsed = schema.parsed

    def __call__(self, record: dict[str, Any], ctx: object = None) -> bytes:
        """``ctx``: a serialization context, as confluent-kafka's serializers take (unused)."""
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self._parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise SerializationError(
                f"record does not fit {self.schema.name} v{self.schema.version}: {exc}"
            ) from exc
        return buf.getvalue()


class SingleObjectSerializer(FramedSerializer):
    """Avro single-object encoding (``C3 01`` + fingerprint + body)."""

    def __init__(self, schema: WriterSchema) -> None:
        super().__init__(schema, single_object_header(schema.fingerprint))


class ConfluentIdSerializer(FramedSerializer):
    """The Confluent wire format (``00`` + 4-byte schema id + body) with an id
    obtained once: encoding never calls the registry."""

    def __init__(self, schema: WriterSchema, schema_id: int) -> None:
        super().__init__(schema, confluent_header(schema_id))
        self.schema_id = schema_id
