"""The two wire framings of an Avro record, defined once (no dependencies), and the
range of timestamps the decoder reads.

* Avro single-object encoding: ``C3 01`` + 8-byte little-endian CRC-64-AVRO
  fingerprint + Avro body.
* Confluent Schema Registry framing: ``00`` + 4-byte big-endian schema id +
  Avro body.

``turnaudit.serialization.wire`` writes and reads them; the turn identity's
chain hash (``turnaudit.identity``) covers the body only, so a stream copied
between registries keeps its chain.
"""

from __future__ import annotations

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
SINGLE_OBJECT_HEADER_LEN = 10  # magic + 8-byte fingerprint
CONFLUENT_MAGIC = 0
CONFLUENT_MAGIC_BYTE = b"\x00"
CONFLUENT_HEADER_LEN = 5  # magic + 4-byte schema id
# The epoch milliseconds a datetime holds (0001-01-01 to 9999-12-31T23:59:59.999Z):
# the decoder refuses a timestamp-millis beyond them, as fastavro did building a datetime.
MIN_MILLIS = -62_135_596_800_000
MAX_MILLIS = 253_402_300_799_999


def single_object_header(fingerprint: bytes) -> bytes:
    return SINGLE_OBJECT_MAGIC + fingerprint


def confluent_header(schema_id: int) -> bytes:
    return CONFLUENT_MAGIC_BYTE + schema_id.to_bytes(4, "big")


def body_start(value: bytes) -> int:
    """Where the Avro body of a framed message starts (0 when it is not framed)."""
    if value[:2] == SINGLE_OBJECT_MAGIC:
        return SINGLE_OBJECT_HEADER_LEN
    if value[:1] == CONFLUENT_MAGIC_BYTE:
        return CONFLUENT_HEADER_LEN
    return 0
