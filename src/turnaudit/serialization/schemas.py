"""The shipped TurnEvent schemas: parsed once, with versions and fingerprints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from turnaudit.errors import SchemaNotFoundError

SCHEMA_PACKAGE = "turnaudit.schemas"
# A record of any Avro schema, as fastavro reads and writes it: its fields are the
# schema's, known only at run time (a TurnEvent's are typed in turnaudit.events).
AvroRecord = dict[str, Any]
# Named types of a schema's JSON (records, enums, fixed), by full name: any shape.
NamedTypes = dict[str, Any]


@dataclass(frozen=True)
class WriterSchema:
    """One schema a writer can use: its text, parsed form and identities."""

    name: str  # e.g. "turn_event"
    version: int
    schema_json: str  # the .avsc text as shipped
    parsed: Any  # fastavro's parsed schema
    fingerprint: bytes  # CRC-64-AVRO of the parsing canonical form, little-endian (8 bytes)

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()


def schema_from_json(schema_json: str, *, name: str, version: int) -> WriterSchema:
    raw = json.loads(schema_json)
    # Named types are local to each version: keep fastavro's global name
    # registry out of it so v1 and v2 may define the same names differently.
    parsed = fastavro.parse_schema(raw, named_schemas={})
    # fastavro gives the CRC-64-AVRO bytes in little-endian order already: the
    # order the single-object header carries them in.
    fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
    return WriterSchema(
        name=name, version=version, schema_json=schema_json, parsed=parsed, fingerprint=fp
    )


# The logical type readers get as the long the wire holds: a datetime built per
# event costs about as much as contract checks on it. Only the reading schema
# loses it; the parsing canonical form (and so the fingerprint) never had it.
WIRE_LONG_LOGICAL_TYPES = frozenset({"timestamp-millis"})


@dataclass(frozen=True)
class DecodingSchema:
    """A writer schema as the project's readers decode it."""

    parsed: Any  # fastavro's parsed schema, timestamp-millis read as a long
    long_time_fields: tuple[str, ...]  # top-level fields whose logical type was dropped
    raw: Any = None  # the same schema as JSON objects (what the native decoder compiles)


def decoding_schema(schema_json: str) -> DecodingSchema:
    """The schema with ``timestamp-millis`` read as epoch milliseconds (an ``int``).

    Everything else, the canonical form and the fingerprint included, is unchanged.
    """
    raw = json.loads(schema_json)
    top_level: list[str] = []

    def strip(node: Any, field_name: str | None) -> Any:
        if isinstance(node, list):
            return [strip(v, field_name) for v in node]
        if not isinstance(node, dict):
            return node
        if node.get("logicalType") in WIRE_LONG_LOGICAL_TYPES and node.get("type") == "long":
            if field_name is not None:
                top_level.append(field_name)
            return {k: v for k, v in node.items() if k != "logicalType"}
        if node.get("type") == "record" and node is raw:
            fields = [{**f, "type": strip(f["type"], f["name"])} for f in node.get("fields", [])]
            return {**node, "fields": fields}
        return {k: strip(v, None) for k, v in node.items()}

    stripped = strip(raw, None)
    parsed = fastavro.parse_schema(stripped, named_schemas={})
    return DecodingSchema(parsed, tuple(top_level), stripped)


@dataclass(frozen=True)
class SchemaCatalog:
    """All versions of one record schema the package ships, oldest first."""

    name: str
    versions: tuple[WriterSchema, ...]

    @property
    def latest(self) -> WriterSchema:
        return self.versions[-1]

    def version(self, version: int) -> WriterSchema:
        for schema in self.versions:
            if schema.version == version:
                return schema
        known = ", ".join(str(s.version) for s in self.versions)
        raise SchemaNotFoundError(f"{self.name} has no schema version {version} (shipped: {known})")

    def by_fingerprint(self) -> dict[bytes, WriterSchema]:
        return {s.fingerprint: s for s in self.versions}


@cache
def shipped_record_names() -> tuple[str, ...]:
    """Every record type the package ships ``.avsc`` files for, e.g. ``turn_event``."""
    names = {
        entry.name.rsplit(".v", 1)[0]
        for entry in resources.files(SCHEMA_PACKAGE).iterdir()
        if entry.name.endswith(".avsc") and ".v" in entry.name
    }
    return tuple(sorted(names))


def shipped_schemas() -> tuple[WriterSchema, ...]:
    """Every shipped writer schema of every record type."""
    return tuple(s for name in shipped_record_names() for s in shipped_catalog(name).versions)


@cache
def shipped_catalog(name: str = "turn_event") -> SchemaCatalog:
    """Load ``schemas/<name>.v<N>.avsc`` from the installed package."""
    found: list[WriterSchema] = []
    for entry in resources.files(SCHEMA_PACKAGE).iterdir():
        stem = entry.name.removesuffix(".avsc")
        if stem == entry.name or not stem.startswith(name + ".v"):
            continue
        version = int(stem.rsplit(".v", 1)[1])
        found.append(schema_from_json(entry.read_text("utf-8"), name=name, version=version))
    if not found:
        raise SchemaNotFoundError(f"no schema files for {name!r} in {SCHEMA_PACKAGE}")
    return SchemaCatalog(name, tuple(sorted(found, key=lambda s: s.version)))


def schema_path(name: str, version: int) -> str:
    """Filesystem path of a shipped .avsc (for independent readers and docs)."""
    return str(resources.files(SCHEMA_PACKAGE).joinpath(f"{name}.v{version}.avsc"))
