"""The native Avro decoder and encoder (the crate in ``native/``, module ``turnaudit._native``).

Every shipped writer schema is compiled once into a ``Decoder`` that turns a
message body into exactly the dict fastavro's ``schemaless_reader`` gives for
that schema, raising where fastavro raises, and refusing bytes after the record.
Schemas it does not promise to decode like fastavro (reader schemas, logical
types, recursive types) are refused when compiled: the caller keeps fastavro
for them and counts them.

The ``Encoder`` of a writer schema writes a record's body exactly as fastavro's
``schemaless_writer`` does, but only for records whose encoding is beyond doubt
(exact built-in types, every field present, one union branch that can take each
value); for any other record it raises ``EncodeFallback`` and the caller hands
the record to fastavro, which writes it or raises its own error.

The project requires the module: ``make setup`` builds it from source (Rust and
cargo, see README.md). Without it the import fails with one line saying so;
there is no silent slow path.
"""

from __future__ import annotations

from typing import Any

try:
    from turnaudit import _native
except ImportError as exc:  # pragma: no cover - the environment, not the code
    raise ImportError(
        "turnaudit's native decoder (module turnaudit._native, crate native/) is not "
        "installed: run `make setup` (it needs Rust's cargo >= 1.95, https://rustup.rs)"
    ) from exc

from turnaudit.events import MAX_MILLIS, MIN_MILLIS
from turnaudit.serialization.schemas import DecodingSchema, decoding_schema

Decoder = _native.Decoder
Encoder = _native.Encoder
NativeStreamTracker = _native.NativeStreamTracker
ContractCheck = _native.ContractCheck
VerifyStep = _native.VerifyStep
BloomFilter = _native.BloomFilter
SortedRunStore = _native.SortedRunStore
chain_hash_hex = _native.chain_hash_hex
EncodeFallback = _native.EncodeFallback
DecodeError = _native.DecodeError
TrailingBytesError = _native.TrailingBytesError
UnsupportedSchemaError = _native.UnsupportedSchemaError

__all__ = [
    "BloomFilter",
    "ContractCheck",
    "DecodeError",
    "Decoder",
    "EncodeFallback",
    "Encoder",
    "NativeStreamTracker",
    "SortedRunStore",
    "TrailingBytesError",
    "UnsupportedSchemaError",
    "VerifyStep",
    "chain_hash_hex",
    "compile_decoder",
    "compile_encoder",
]


def compile_decoder(decoding: DecodingSchema) -> Any:
    """The native decoder of a writer schema as the project's readers decode it.

    Raises ``UnsupportedSchemaError`` for a schema the native compiler refuses.
    """
    return Decoder(decoding.raw, decoding.long_time_fields, MIN_MILLIS, MAX_MILLIS)


def compile_encoder(schema_json: str) -> Any:
    """The native encoder of a writer schema: ``timestamp-millis`` longs are
    written from their epoch milliseconds (a datetime goes to fastavro).

    Raises ``UnsupportedSchemaError`` for a schema the native compiler refuses.
    """
    return Encoder(decoding_schema(schema_json).raw)
