"""The bytes both languages write and read are one set of values: the chain's domain
tags, the legacy fingerprints, genesis and the framing headers, as the crate holds them
(``native/src/constants.rs``, exported by ``turnaudit._native``) and as the Python
modules hold them (``turnaudit.chain``, ``turnaudit.serialization.framing``). Either
copy changed alone fails here."""

from __future__ import annotations

import pytest

from turnaudit import _native, chain, htir_steps
from turnaudit.consumers import otel_records
from turnaudit.serialization import framing

PAIRS = {
    "CHAIN_DOMAIN": chain.CHAIN_DOMAIN,
    "SCHEMA_CHAIN_DOMAIN": chain.SCHEMA_CHAIN_DOMAIN,
    "LEGACY_CHAIN_FINGERPRINTS": chain.LEGACY_CHAIN_FINGERPRINTS,
    "GENESIS_HASH": chain.GENESIS_HASH,
    "SINGLE_OBJECT_MAGIC": framing.SINGLE_OBJECT_MAGIC,
    "SINGLE_OBJECT_HEADER": framing.SINGLE_OBJECT_HEADER_LEN,
    "CONFLUENT_MAGIC": framing.CONFLUENT_MAGIC_BYTE,
    "CONFLUENT_HEADER": framing.CONFLUENT_HEADER_LEN,
    # Not a copy: the HTIR steps' surface cut is the crate's, which Python takes.
    "SURFACE_LIMIT": htir_steps.SURFACE_LIMIT,
    # Nor these: the OTel records' cuts are the crate's (otlp.rs), which Python names.
    "OTLP_MAX_TEXT": otel_records.MAX_TEXT,
    "OTLP_MAX_EXPLANATION": otel_records.MAX_EXPLANATION,
    "OTLP_MAX_IDS": otel_records.MAX_IDS,
}


def _native_value(name: str) -> object:
    value = getattr(_native, name)
    return frozenset(value) if isinstance(value, list) else value


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_the_crate_and_python_hold_one_value(name: str) -> None:
    assert _native_value(name) == PAIRS[name]


def test_every_constant_the_crate_exports_is_compared() -> None:
    exported = {
        n for n in dir(_native) if n.isupper() and not isinstance(getattr(_native, n), type)
    }
    assert exported == set(PAIRS)


def test_the_headers_agree_with_what_framing_writes() -> None:
    assert framing.single_object_header(b"\x01" * 8)[:2] == _native.SINGLE_OBJECT_MAGIC
    assert len(framing.single_object_header(b"\x01" * 8)) == _native.SINGLE_OBJECT_HEADER
    assert framing.confluent_header(7)[:1] == _native.CONFLUENT_MAGIC
    assert len(framing.confluent_header(7)) == _native.CONFLUENT_HEADER
    assert bytes([framing.CONFLUENT_MAGIC]) == framing.CONFLUENT_MAGIC_BYTE
