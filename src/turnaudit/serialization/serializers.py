"""The TurnEvent serializers: one writer schema behind a fixed framing header, Avro
single-object (``C3 01`` + fingerprint) or Confluent (``00`` + schema id).

Bodies are written by the native encoder (``turnaudit.serialization.native``)
when the schema compiles; a record it does not write as surely as fastavro
(``EncodeFallback``) and every record of a schema it does not compile go to
fastavro, the reference. Either way the bytes, or the error, are fastavro's.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import fastavro
import structlog

from turnaudit.errors import SerializationError
from turnaudit.serialization import native
from turnaudit.serialization.framing import confluent_header, single_object_header
from turnaudit.serialization.schemas import AvroRecord, WriterSchema

log = structlog.get_logger("turnaudit.serialization")

_Fallback = native.EncodeFallback


@dataclass(frozen=True)
class EncoderStats:
    """Which encoder writes a serializer's records."""

    native_schema: bool  # the schema compiled: the native encoder writes what it surely can
    fastavro_records: int  # records written (or refused) by fastavro


class FramedSerializer:
    """Encodes records with one writer schema behind a fixed framing header."""

    def __init__(self, schema: WriterSchema, header: bytes) -> None:
        self.schema = schema
        self._header = header
        self._parsed = schema.parsed
        self._fastavro_records = 0
        try:
            self._native: Any = native.compile_encoder(schema.schema_json)
        except (native.UnsupportedSchemaError, ValueError, TypeError) as exc:
            # Any schema the compiler cannot take is fastavro's, as it always was.
            self._native = None
            log.info(
                "schema_written_by_fastavro",
                schema=f"{schema.name} v{schema.version}",
                reason=f"not compiled: {exc}",
            )

    def __call__(self, record: AvroRecord, ctx: object = None) -> bytes:
        """``ctx``: a serialization context, as confluent-kafka's serializers take (unused)."""
        if self._native is not None:
            try:
                encoded: bytes = self._native(record, self._header)
                return encoded
            except _Fallback:
                pass  # fastavro writes it, or raises the error below
        self._fastavro_records += 1
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self._parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise SerializationError(
                f"record does not fit {self.schema.name} v{self.schema.version}: {exc}"
            ) from exc
        return buf.getvalue()

    def stats(self) -> EncoderStats:
        return EncoderStats(self._native is not None, self._fastavro_records)


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
