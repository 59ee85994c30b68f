"""What the deserializer reads with: a decoded message (``DecodedTurnEvent``), its framing,
and the plan that turns one writer schema's data into the current reader's shape (the
native decoder for compiled schemas, fastavro otherwise)."""

from __future__ import annotations

import enum
import io
from typing import Any, NamedTuple, cast

import fastavro

from turnaudit.errors import SerializationError
from turnaudit.serialization import native
from turnaudit.serialization.framing import MAX_MILLIS, MIN_MILLIS
from turnaudit.serialization.schemas import AvroRecord


class Framing(enum.StrEnum):
    SINGLE_OBJECT = "single_object"
    CONFLUENT = "confluent"


class DecodedTurnEvent(NamedTuple):
    """A decoded message: the event in the current reader's shape, and its origin.

    For shipped versions the record keeps the writer's own fields too (v1's
    back-compat per-field verdicts), so contract 4 can be checked on it.
    ``occurred_at`` is epoch milliseconds, the long the wire holds. (A named
    tuple: one is built per consumed message.)
    """

    event: AvroRecord
    writer_version: int
    framing: Framing
    writer_fingerprint: str  # hex fingerprint, or "registry:<id>"


_tuple_new = tuple.__new__


class ReadPlan:
    """How to turn one writer schema's data into the current reader's shape."""

    def __init__(
        self,
        writer: Any,
        reader: Any,
        version: int | None,
        fill: list[tuple[str, Any]],
        *,
        unusable: str | None = None,
        time_fields: tuple[str, ...] = (),
        native_decoder: Any = None,
    ):
        self.writer = writer
        # The compiled native decoder (the body to the record, trailing bytes
        # and time fields checked), or None: fastavro reads this schema.
        self.native = native_decoder
        self.reader = reader  # None: decode with the writer schema, then fill defaults
        self.version = version
        # Defaults of fields the writer lacks: immutable ones set in one
        # update, mutable ones (lists, maps) copied for every record.
        self.fill_shared = {name: d for name, d in fill if not isinstance(d, list | dict)}
        self.fill_copied = [(name, d) for name, d in fill if isinstance(d, list | dict)]
        self.time_fields = time_fields  # epoch-millis fields to hold to datetime's range
        # Why this writer schema cannot be read (set once, on its first failure):
        # later messages naming it are refused at once.
        self.unusable = unusable
        # How decoded messages name their writer schema: the hex fingerprint,
        # or "registry:<id>" (set by the decoder, once per plan).
        self.origin = ""

    def read(self, body: io.BytesIO) -> AvroRecord:
        record = cast(AvroRecord, fastavro.schemaless_reader(body, self.writer, self.reader))
        if self.fill_shared:
            record.update(self.fill_shared)
        for name, default in self.fill_copied:
            record[name] = default.copy()
        for name in self.time_fields:
            # Microseconds written into a millis field, say: no date at all,
            # and the message does not decode (as when fastavro built a datetime).
            millis = record[name]
            if type(millis) is int and not MIN_MILLIS <= millis <= MAX_MILLIS:
                raise OverflowError(
                    f"{name} {millis} ms is beyond the range of a date (years 1-9999)"
                )
        return record


def read_natively(
    plan: ReadPlan, payload: bytes, body_start: int, framing: Framing
) -> DecodedTurnEvent:
    """The body decoded by the plan's native decoder: read in place, bytes after
    the record and time fields beyond a date's range refused, with the errors
    of the fastavro path (``TurnEventDeserializer.__call__``)."""
    try:
        record = plan.native(payload, body_start)
    except native.TrailingBytesError as exc:
        raise SerializationError(
            f"Avro body has {exc.args[0]} trailing bytes after a record of schema {plan.origin}"
        ) from None
    except Exception as exc:  # DecodeError, UnicodeDecodeError, MemoryError
        raise SerializationError(
            f"Avro body does not decode with schema {plan.origin}: {exc!r}"
        ) from exc
    if plan.fill_shared:
        record.update(plan.fill_shared)
    for name, default in plan.fill_copied:
        record[name] = default.copy()
    # Shipped versions only: the plan knows its version.
    return _tuple_new(DecodedTurnEvent, (record, plan.version, framing, plan.origin))


def named(plan: ReadPlan, origin: str) -> ReadPlan:
    plan.origin = origin
    return plan
