"""The chain rule is one rule: ``turnaudit.chain`` (Python) and the native tracker
(``native/src/track/chain.rs``) give the same hash for any body, any framing and any writer
schema fingerprint; from v5 on the hash binds the writer schema, so no re-framing of a
turn's body under another schema keeps its chain hash; v1..v4 chains hash as they did."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.chain import (
    CHAIN_DOMAIN,
    LEGACY_CHAIN_FINGERPRINTS,
    SCHEMA_CHAIN_DOMAIN,
    binds_schema,
    chain_hash,
)
from turnaudit.serialization.framing import confluent_header, single_object_header
from turnaudit.serialization.native import chain_hash_hex
from turnaudit.serialization.schemas import shipped_catalog

CATALOG = shipped_catalog()
SHIPPED_FPS = [s.fingerprint for s in CATALOG.versions]
FINGERPRINTS = st.one_of(st.sampled_from(SHIPPED_FPS), st.binary(min_size=8, max_size=8))


def test_the_legacy_rule_is_exactly_turn_event_v1_to_v4() -> None:
    assert {CATALOG.version(v).fingerprint for v in (1, 2, 3, 4)} == LEGACY_CHAIN_FINGERPRINTS
    assert binds_schema(CATALOG.version(5).fingerprint)
    assert not any(binds_schema(fp) for fp in LEGACY_CHAIN_FINGERPRINTS)


@given(body=st.binary(max_size=300), fp=FINGERPRINTS, schema_id=st.integers(0, 2**32 - 1))
@settings(max_examples=600)
def test_python_and_native_compute_one_rule_in_every_framing(
    body: bytes, fp: bytes, schema_id: int
) -> None:
    single = single_object_header(fp) + body
    confluent = confluent_header(schema_id) + body
    assert chain_hash(single) == chain_hash_hex(single) == chain_hash_hex(single, fp)
    assert chain_hash(confluent, fp) == chain_hash_hex(confluent, fp)
    # One writer schema, one hash, whatever the framing: a copy between registries keeps it.
    assert chain_hash(single) == chain_hash(confluent, fp)
    # Without a resolved schema an unframed or Confluent message hashes by the v1 rule.
    assert chain_hash(confluent) == chain_hash_hex(confluent)
    assert chain_hash(confluent) == hashlib.sha256(CHAIN_DOMAIN + body).hexdigest()


@given(body=st.binary(max_size=300), fp=FINGERPRINTS)
def test_the_hash_is_the_documented_formula(body: bytes, fp: bytes) -> None:
    expected = (
        hashlib.sha256(SCHEMA_CHAIN_DOMAIN + fp + body)
        if fp not in LEGACY_CHAIN_FINGERPRINTS
        else hashlib.sha256(CHAIN_DOMAIN + body)
    )
    assert chain_hash(single_object_header(fp) + body) == expected.hexdigest()


@given(body=st.binary(max_size=300), signed=FINGERPRINTS, reframed=FINGERPRINTS)
@settings(max_examples=600)
def test_a_body_reframed_under_another_schema_changes_its_hash_unless_both_are_legacy(
    body: bytes, signed: bytes, reframed: bytes
) -> None:
    before = chain_hash(single_object_header(signed) + body)
    after = chain_hash(single_object_header(reframed) + body)
    both_legacy = signed in LEGACY_CHAIN_FINGERPRINTS and reframed in LEGACY_CHAIN_FINGERPRINTS
    if signed == reframed or both_legacy:
        assert before == after
    else:
        # v4 bodies re-framed under v4 siblings keep the v1 hash: signed checkpoints
        # name the writer schemas used, and verify holds each turn to them.
        assert before != after


@pytest.mark.parametrize("bad", [b"", b"1234567", b"123456789"])
def test_a_wrong_length_fingerprint_is_refused_by_both(bad: bytes) -> None:
    with pytest.raises(ValueError, match="8 bytes"):
        chain_hash_hex(b"\x00\x00\x00\x00\x01body", bad)
    with pytest.raises(ValueError, match="8 bytes"):
        chain_hash(b"\x00\x00\x00\x00\x01body", bad or b"1234567")
