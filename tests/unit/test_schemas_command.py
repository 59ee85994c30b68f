"""``turnaudit schemas``: every record type listed, published fingerprints, ``get`` by any form."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import PROJECT_ROOT
from tests.support.forked_cli import forked_turnaudit as run_turnaudit
from turnaudit.commands.schemas import fingerprint_table, java_long, wire_candidates
from turnaudit.serialization.schemas import (
    WriterSchema,
    schema_from_json,
    shipped_record_names,
    shipped_schemas,
)

PUBLISHED = PROJECT_ROOT / "schemas" / "fingerprints.txt"


def published_rows() -> list[list[str]]:
    return [line.split() for line in PUBLISHED.read_text().splitlines() if not line.startswith("#")]


def test_the_published_fingerprints_are_the_generated_ones() -> None:
    assert PUBLISHED.read_text() == fingerprint_table(), (
        "stale: run `turnaudit schemas fingerprints > schemas/fingerprints.txt`"
    )


def test_every_avsc_file_has_a_published_fingerprint_in_every_form() -> None:
    files = sorted(p.name for p in (PROJECT_ROOT / "schemas").glob("*.avsc"))
    rows = published_rows()
    assert sorted(row[4] for row in rows) == files
    for wire_hex, long_text, crc_hex, _, file in rows:
        wire = bytes.fromhex(wire_hex)
        schema = next(s for s in shipped_schemas() if f"{s.name}.v{s.version}.avsc" == file)
        assert schema.fingerprint == wire
        # The three forms name one number: little-endian wire bytes, Java's signed long,
        # and the CRC as it is usually printed (most significant byte first).
        assert int(long_text) == int.from_bytes(wire, "little", signed=True)
        assert bytes.fromhex(crc_hex) == wire[::-1]
        # And the file as shipped still has that fingerprint.
        text = (PROJECT_ROOT / "schemas" / file).read_text()
        assert schema_from_json(text, name="x", version=0).fingerprint == wire


def test_list_covers_every_record_type() -> None:
    result = run_turnaudit("schemas", "list")
    assert result.returncode == 0, result.stderr
    assert set(shipped_record_names()) >= {"turn_event", "htir_trace", "auditor_observation"}
    for schema in shipped_schemas():
        line = next(
            line
            for line in result.stdout.splitlines()
            if line.startswith(f"{schema.name} v{schema.version} ")
        )
        assert schema.fingerprint_hex in line
        assert str(java_long(schema.fingerprint)) in line


@pytest.mark.parametrize("schema", shipped_schemas(), ids=lambda s: f"{s.name}.v{s.version}")
def test_get_prints_the_writer_schema_for_the_hex_key_and_the_java_long(
    schema: WriterSchema,
) -> None:
    for form in (
        schema.fingerprint_hex,
        schema.fingerprint_hex.upper(),
        str(java_long(schema.fingerprint)),
    ):
        result = run_turnaudit("schemas", "get", "--no-topic", form)
        assert result.returncode == 0, (form, result.stderr)
        assert json.loads(result.stdout) == json.loads(schema.schema_json)


def test_get_says_what_is_wrong_in_one_line() -> None:
    unknown = run_turnaudit("schemas", "get", "--no-topic", "0123456789abcdef")
    assert unknown.returncode == 1
    assert unknown.stdout == ""
    assert "no schema with fingerprint 0123456789abcdef" in unknown.stderr
    assert len(unknown.stderr.splitlines()) == 1
    garbage = run_turnaudit("schemas", "get", "--no-topic", "not-a-fingerprint")
    assert garbage.returncode == 2
    assert "neither 16 hex digits nor a signed 64-bit number" in garbage.stderr


@given(st.binary(min_size=8, max_size=8))
def test_both_forms_of_any_fingerprint_name_its_wire_bytes(wire: bytes) -> None:
    assert wire in wire_candidates(wire.hex())
    assert wire in wire_candidates(str(java_long(wire)))
    # The decimal form names these bytes and, if it is also 16 digits, what they read as hex.
    decimal = str(java_long(wire))
    as_hex = {bytes.fromhex(decimal)} if len(decimal) == 16 and decimal.isdigit() else set()
    assert set(wire_candidates(decimal)) <= {wire} | as_hex
