"""Wire formats for TurnEvents, and the one reader that accepts them all.

* Avro single-object encoding (default, no server needed):
  ``C3 01`` + 8-byte little-endian CRC-64-AVRO fingerprint + Avro body.
* Confluent Schema Registry framing, when a registry URL is configured:
  ``00`` + 4-byte big-endian schema id + Avro body, through
  ``confluent_kafka.schema_registry``.

Serializers and the deserializer are callables taking the message and a
``SerializationContext``, like confluent-kafka's own. Library errors are
re-raised as this package's ``SerializationError`` subclasses.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from fastavro.read import SchemaResolutionError

from turnaudit.errors import (
    SchemaCompatibilityError,
    SchemaNotFoundError,
    SerializationError,
    UnknownFramingError,
)
from turnaudit.serialization import native
from turnaudit.serialization.framing import (
    CONFLUENT_HEADER_LEN,
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MAGIC,
)
from turnaudit.serialization.read_plans import (
    DecodedTurnEvent,
    Framing,
    ReadPlan,
    named,
    read_natively,
)
from turnaudit.serialization.registry import (
    ConfluentSerializer,
    RegistryClient,
    registry_client,
)
from turnaudit.serialization.schemas import (
    SchemaCatalog,
    WriterSchema,
    decoding_schema,
    schema_from_json,
)
from turnaudit.serialization.serializers import (
    ConfluentIdSerializer,
    FramedSerializer,
    SingleObjectSerializer,
)

__all__ = [  # the framing constants, the registry's client, the serializers and the decoded
    # message's types: where readers and writers of the wire look
    "CONFLUENT_HEADER_LEN",
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_HEADER_LEN",
    "SINGLE_OBJECT_MAGIC",
    "ConfluentIdSerializer",
    "ConfluentSerializer",
    "DecodedTurnEvent",
    "FramedSerializer",
    "Framing",
    "RegistryClient",
    "SingleObjectSerializer",
    "registry_client",
]

log = structlog.get_logger("turnaudit.serialization")

# A function that returns the schema JSON for an unknown fingerprint, or None.
FingerprintResolver = Callable[[bytes], str | None]
# A shipped schema read natively: (fingerprint, decoder, version, shared defaults, copied).
NativePlan = tuple[bytes, Any, int, dict[str, Any], list[tuple[str, Any]]]


class UnusableSchemaError(SerializationError):
    """A writer schema was found (schemas topic, registry) but cannot be read into
    the current reader: not a schema, or it does not resolve against the reader."""


_tuple_new = tuple.__new__
# Looked up once: an enum member read per message costs as much as the rest of the framing.
_SINGLE_OBJECT, _CONFLUENT = Framing.SINGLE_OBJECT, Framing.CONFLUENT


@dataclass(frozen=True)
class DecoderStats:
    """Which decoder reads the writer schemas a ``TurnEventDeserializer`` has met."""

    native_schemas: int  # compiled by the native decoder
    fastavro_schemas: int  # read by fastavro: resolved into the reader, or refused by the compiler
    registry_retries: int = 0  # schema-id lookups retried after a transient registry error


# Waits between attempts to resolve a schema id while the registry fails transiently
# (connection refused, a timeout, 408/429/5xx): about 3.6 s in all before the message
# is given up as unknown_schema.
REGISTRY_RETRY_BACKOFF_S: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0)
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def registry_error_is_transient(exc: BaseException) -> bool:
    """A registry error that may pass: a retriable HTTP status, or no answer at all
    (a network error, a timeout). A registry that answered "not found" is final."""
    status = getattr(exc, "http_status_code", None)
    if isinstance(status, int):
        return status in _TRANSIENT_STATUS
    return not isinstance(exc, (ValueError, KeyError, TypeError, AttributeError))


class TurnEventDeserializer:
    """Reads TurnEvents in either framing and any known schema version.

    * Shipped versions are decoded with their own schema (cheapest, and keeps
      legacy fields for contract checks); fields the current reader added get
      their declared defaults.
    * Fingerprints the package does not ship are looked up through
      ``resolver`` (the compacted schemas topic) and resolved into the current
      reader by Avro schema resolution; registry ids likewise through the
      Schema Registry client.

    Bodies are decoded by the native decoder (``turnaudit.serialization.native``)
    for every writer schema it compiles (every shipped version); fastavro, the
    reference, reads the others (schemas learned at run time, resolved into the
    reader), counted in ``stats()`` and logged once per schema. Both give the
    same records and the same errors.
    """

    def __init__(
        self,
        catalog: SchemaCatalog,
        *,
        registry: RegistryClient | None = None,
        resolver: FingerprintResolver | None = None,
        registry_backoff: Sequence[float] = REGISTRY_RETRY_BACKOFF_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._catalog = catalog
        self._current = catalog.latest
        self._reader = decoding_schema(self._current.schema_json).parsed
        self._registry = registry
        self._registry_backoff = tuple(registry_backoff)
        self._sleep = sleep
        self.registry_retries = 0  # read by the services' metrics at scrape time
        self._resolver = resolver
        self._lock = threading.Lock()
        self._native_schemas = 0
        self._fastavro_schemas = 0
        self._by_fp: dict[bytes, ReadPlan] = {
            s.fingerprint: named(self._plan_for_shipped(s), s.fingerprint.hex())
            for s in catalog.versions
        }
        self._by_registry_id: dict[int, ReadPlan] = {}
        # The fingerprint of the schema each registry id resolved to (chain hashes bind it).
        self._registry_fps: dict[int, bytes] = {}

    def _plan_for_shipped(self, schema: WriterSchema) -> ReadPlan:
        writer_fields = {f["name"] for f in json.loads(schema.schema_json)["fields"]}
        added = [
            f
            for f in json.loads(self._current.schema_json)["fields"]
            if f["name"] not in writer_fields
        ]
        no_default = [f["name"] for f in added if "default" not in f]
        if no_default:
            raise SchemaCompatibilityError(
                f"{self._catalog.name} v{self._current.version} cannot read v{schema.version}: "
                f"new fields without a default: {', '.join(no_default)}"
            )
        fill = [(f["name"], f["default"]) for f in added]
        decoding = decoding_schema(schema.schema_json)
        try:
            compiled = native.compile_decoder(decoding)
            self._native_schemas += 1
        except native.UnsupportedSchemaError as exc:
            compiled = None
            self._count_fastavro(f"{schema.name} v{schema.version}", f"not compiled: {exc}")
        return ReadPlan(
            decoding.parsed,
            None,
            schema.version,
            fill,
            time_fields=decoding.long_time_fields,
            native_decoder=compiled,
        )

    def native_plans(self) -> list[NativePlan]:
        """(fingerprint, decoder, version, shared defaults, copied defaults) of every shipped
        writer schema read natively: what a native reader needs to decode them as
        ``__call__`` does (verify's native step)."""
        return [
            (fp, plan.native, plan.version, plan.fill_shared, plan.fill_copied)
            for fp, plan in self._by_fp.items()
            if plan.native is not None and plan.version is not None
        ]

    def writer_fingerprint(self, decoded: DecodedTurnEvent) -> bytes | None:
        """The 8-byte fingerprint of the writer schema of a message this reader decoded
        (a registry id's: of the schema it resolved to): what its chain hash binds."""
        origin = decoded.writer_fingerprint
        if origin.startswith("registry:"):
            return self._registry_fps.get(int(origin[9:]))
        try:
            return bytes.fromhex(origin) if len(origin) == 16 else None
        except ValueError:
            return None

    def _count_fastavro(self, schema: str, why: str) -> None:
        self._fastavro_schemas += 1
        log.info("schema_read_by_fastavro", schema=schema, reason=why)

    def stats(self) -> DecoderStats:
        return DecoderStats(self._native_schemas, self._fastavro_schemas, self.registry_retries)

    def _plan_for_foreign(self, schema_json: str, origin: str) -> ReadPlan:
        try:
            foreign = schema_from_json(schema_json, name=self._catalog.name, version=-1)
        except Exception as exc:  # json and fastavro raise many types for a bad schema
            why = f"writer schema {origin} does not parse: {exc!r}"
            return ReadPlan(None, None, None, [], unusable=why)
        if not isinstance(foreign.parsed, dict) or foreign.parsed.get("type") != "record":
            return ReadPlan(
                None, None, None, [], unusable=f"writer schema {origin} is not a record"
            )
        writer = decoding_schema(schema_json)
        # Resolved into the reader: fastavro's schema resolution, the reference.
        return ReadPlan(writer.parsed, self._reader, None, [], time_fields=writer.long_time_fields)

    def __call__(self, payload: bytes | None, ctx: object = None) -> DecodedTurnEvent:
        if not payload:
            raise UnknownFramingError("empty message: no Avro framing")
        if type(payload) is not bytes:
            payload = bytes(payload)  # a bytearray or memoryview: hashable slices below
        if payload[:2] == SINGLE_OBJECT_MAGIC and len(payload) >= SINGLE_OBJECT_HEADER_LEN:
            plan = self._by_fp.get(payload[2:SINGLE_OBJECT_HEADER_LEN]) or (
                self._resolve_fingerprint(payload[2:SINGLE_OBJECT_HEADER_LEN])
            )
            framing, body_start = _SINGLE_OBJECT, SINGLE_OBJECT_HEADER_LEN
        elif payload[0] == CONFLUENT_MAGIC and len(payload) > CONFLUENT_HEADER_LEN:
            schema_id = int.from_bytes(payload[1:CONFLUENT_HEADER_LEN], "big")
            plan = self._by_registry_id.get(schema_id) or self._resolve_registry_id(schema_id)
            framing, body_start = _CONFLUENT, CONFLUENT_HEADER_LEN
        else:
            raise UnknownFramingError(
                f"message starts with {bytes(payload[:2]).hex() or 'nothing'}: "
                "neither Avro single-object (c301) nor Confluent (00) framing"
            )
        if plan.unusable is not None:
            raise UnusableSchemaError(plan.unusable)
        if plan.native is not None:
            return read_natively(plan, payload, body_start, framing)
        # The body read in place, after the header (no copy of it).
        body = io.BytesIO(payload)
        body.seek(body_start)
        try:
            record = plan.read(body)
            version = (
                plan.version
                if plan.version is not None
                else int(record["verdicts"]["schema_version"])
            )
        except SchemaResolutionError as exc:
            # The writer schema (from the schemas topic or a registry) does not
            # resolve against the reader: every message naming it is unusable.
            plan.unusable = (
                f"writer schema {plan.origin} does not resolve against the reader: {exc}"
            )
            raise UnusableSchemaError(plan.unusable) from exc
        except Exception as exc:
            # Any bytes may arrive: fastavro raises EOFError, ValueError,
            # OverflowError (a timestamp-millis beyond datetime's range),
            # MemoryError-sized lengths as ValueError, ... and a resolved
            # foreign record may lack what a TurnEvent has. None of it may
            # escape as anything but "this message does not decode".
            raise SerializationError(
                f"Avro body does not decode with schema {plan.origin}: {exc!r}"
            ) from exc
        trailing = len(payload) - body.tell()
        if trailing:
            raise SerializationError(
                f"Avro body has {trailing} trailing bytes after a record of schema {plan.origin}"
            )
        # The named tuple built without its Python-level __new__ (one per message).
        return _tuple_new(DecodedTurnEvent, (record, version, framing, plan.origin))

    def _resolve_fingerprint(self, fp: bytes) -> ReadPlan:
        schema_json = self._resolver(fp) if self._resolver is not None else None
        if schema_json is None:
            raise SchemaNotFoundError(
                f"unknown writer schema fingerprint {fp.hex()}: not shipped with this reader "
                "and not in the schemas topic"
            )
        with self._lock:
            plan = self._by_fp.get(fp)
            if plan is None:
                plan = named(self._plan_for_foreign(schema_json, fp.hex()), fp.hex())
                if plan.unusable is None:
                    self._count_fastavro(fp.hex(), "resolved into the reader schema")
                self._by_fp[fp] = plan
        return plan

    def _registry_schema(self, registry: RegistryClient, schema_id: int) -> str:
        """The writer schema of a registry id; a transient registry error is retried with
        the bounded backoff (each retry counted) before the id is given up as not found."""
        attempt = 0
        while True:
            try:
                return registry.get_schema(schema_id).schema_str or ""
            except Exception as exc:  # the registry client raises many unrelated types
                if attempt >= len(self._registry_backoff) or not registry_error_is_transient(exc):
                    tried = f" after {attempt + 1} attempts" if attempt else ""
                    raise SchemaNotFoundError(
                        f"schema id {schema_id} not found in the registry{tried}: {exc}"
                    ) from exc
                log.warning(
                    "schema_registry_retry",
                    schema_id=schema_id,
                    attempt=attempt + 1,
                    error=str(exc)[:300],
                )
                self._sleep(self._registry_backoff[attempt])
                attempt += 1
                with self._lock:
                    self.registry_retries += 1

    def _resolve_registry_id(self, schema_id: int) -> ReadPlan:
        if self._registry is None:
            raise SchemaNotFoundError(
                f"Confluent-framed message (schema id {schema_id}) "
                "but no Schema Registry is configured"
            )
        schema_json = self._registry_schema(self._registry, schema_id)
        with self._lock:
            plan = self._by_registry_id.get(schema_id)
            if plan is None:
                # The registry may hold a shipped version: read it like one.
                plan = self._plan_for_foreign(schema_json, f"registry:{schema_id}")
                if plan.unusable is None:
                    fp = schema_from_json(
                        schema_json, name=self._catalog.name, version=-1
                    ).fingerprint
                    self._registry_fps[schema_id] = fp
                    shipped = self._catalog.by_fingerprint().get(fp)
                    if shipped is not None:
                        plan = self._plan_for_shipped(shipped)
                    else:
                        self._count_fastavro(
                            f"registry:{schema_id}", "resolved into the reader schema"
                        )
                self._by_registry_id[schema_id] = named(plan, f"registry:{schema_id}")
        return plan
