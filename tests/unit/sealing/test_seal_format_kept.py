"""Sealing writes the bytes it always wrote, and its nonces never repeat under a key.

The format written out plainly (docs/privacy.md: the texts in UTF-8 joined by 0xFF, the
associated data the context, the four ids joined the same way, then the sequence) is the
reference here: for any turn, any texts (NUL, 0xFF's character, lone surrogates) and any
run of sessions and producers through one data key, the sealer's ciphertext is AES-GCM's
over exactly those bytes. A turn sealed by the earlier code (a kept vector) opens, and seals
again to the same bytes. A data key record is ``json.dumps(sort_keys=True)``'s bytes for any
fields. Nonces drawn in bulk are all different, and a forked child hands out none of its
parent's.
"""

from __future__ import annotations

import base64
import copy
import json
import os
from typing import Any, cast

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.sealing.support import KeyTopic, any_text, ids, keyring, sealer, turn_of, v5_turn
from turnaudit.events import OutgoingTurnEvent, TurnEvent
from turnaudit.sealing import DataKeyRecord, WrappedKey
from turnaudit.sealing.envelope import TurnSealer, open_event, surfaces_of
from turnaudit.sealing.keys import NONCE_BYTES, POOL_BYTES, RandomPool
from turnaudit.verdicts import UNKNOWN_DOMAIN_SURFACE

KEY = bytes(range(32))
NONCE = bytes(range(100, 112))


def reference_framed(texts: list[str]) -> bytes:
    return b"\xff".join(t.encode("utf-8", "surrogatepass") for t in texts)


def reference_aad(event: dict[str, Any], data_key_id: str) -> bytes:
    names = (event["event_id"], event["session_id"], event["producer_id"], data_key_id)
    sequence = int(event["sequence"]).to_bytes(8, "big", signed=True)
    return b"turnaudit.sealed.v1\x00" + reference_framed(list(names)) + sequence


def reference_texts(event: dict[str, Any]) -> list[str]:
    texts = [event["surface"], event["walk_surface"], event["articulation_surface"]]
    texts += event["input_tokens"]
    for step in event["tool_steps"]:
        texts += [step["arguments"], step["result"]]
    return texts


# Texts that stress the framing: the NUL it joins by, U+00FF, lone surrogates, the stub.
edgy_text = any_text | st.sampled_from(["", "\x00", "a\x00b", "\xff", "\udcff", "\ud800x"])
turn_texts = st.tuples(
    edgy_text,
    edgy_text | st.just(UNKNOWN_DOMAIN_SURFACE),
    edgy_text,
    st.lists(edgy_text, max_size=5).map(tuple),
    st.lists(st.tuples(edgy_text, edgy_text), max_size=3).map(tuple),
)
identity = st.tuples(ids, ids, ids, st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=300)
@given(identity, turn_texts, ids)
def test_any_turn_seals_to_aes_gcm_over_the_plainly_written_format(
    who: tuple[str, str, str, int], parts: tuple[Any, ...], data_key_id: str
) -> None:
    event = turn_of(who, parts)
    expected = AESGCM(KEY).encrypt(
        NONCE, reference_framed(reference_texts(event)), reference_aad(event, data_key_id)
    )
    sealed = copy.deepcopy(event)
    TurnSealer(AESGCM(KEY), data_key_id).seal(cast(OutgoingTurnEvent, sealed), NONCE)
    assert sealed["sealed"] == {"data_key_id": data_key_id, "nonce": NONCE, "ciphertext": expected}
    opened = open_event(cast(TurnEvent, sealed), AESGCM(KEY))
    assert opened == surfaces_of(cast(TurnEvent, event))


@settings(max_examples=100)
@given(st.lists(st.tuples(st.sampled_from(["s-1", "s-2"]), ids), min_size=2, max_size=12))
def test_one_data_key_over_sessions_and_producers_in_any_order_binds_each_turn_to_its_own(
    run: list[tuple[str, str]],
) -> None:
    sealer_ = TurnSealer(AESGCM(KEY), "dk-1")
    for sequence, (session, producer) in enumerate(run):
        event = v5_turn(session, sequence, producer_id=producer)
        expected_aad = reference_aad(event, "dk-1")
        sealer_.seal(cast(OutgoingTurnEvent, event), NONCE)
        sealed = event["sealed"]
        assert AESGCM(KEY).decrypt(NONCE, sealed["ciphertext"], expected_aad)


# A turn sealed by the code before the associated data's tail and the one-encode framing
# (this key, this nonce): every such turn on a topic must still open, and seal the same.
KEPT_EVENT: dict[str, Any] = {
    "event_id": "e-1",
    "session_id": "séance-7",
    "producer_id": "p-1",
    "sequence": 41,
    "surface": "Take 200mg.",
    "walk_surface": UNKNOWN_DOMAIN_SURFACE,
    "articulation_surface": "naïve \udc80 text",
    "input_tokens": ["how", "much", ""],
    "tool_steps": [{"name": "t", "ok": True, "arguments": '{"q": 1}', "result": "ok\x00done"}],
}
KEPT_CIPHERTEXT = bytes.fromhex(
    "1c7ab50359db66ae53057117811004962cad7164a6089c1fc6b8c21504cdc48b3b9f25e0a1a01b2489"
    "96004b022aa5b8e436ed8448b5be53d8808eeccfb0d87567e7db6ab9255ea8fbcc756aad07c44e4a29"
    "921cc84b17"
)


def test_a_turn_sealed_by_the_earlier_code_opens_and_seals_again_to_the_same_bytes() -> None:
    written = {
        **copy.deepcopy(KEPT_EVENT),
        "surface": "",
        "articulation_surface": "",
        "input_tokens": ["", "", ""],
        "tool_steps": [{"name": "t", "ok": True, "arguments": "", "result": ""}],
        "sealed": {"data_key_id": "dk-0001", "nonce": NONCE, "ciphertext": KEPT_CIPHERTEXT},
    }
    opened = open_event(cast(TurnEvent, written), AESGCM(KEY))
    assert opened == surfaces_of(cast(TurnEvent, KEPT_EVENT))
    again = copy.deepcopy(KEPT_EVENT)
    TurnSealer(AESGCM(KEY), "dk-0001").seal(cast(OutgoingTurnEvent, again), NONCE)
    assert again == written


record_fields = st.tuples(
    ids,
    ids,
    ids,
    st.binary(max_size=40),
    st.binary(max_size=80),
    st.integers(-(2**70), 2**70),
    st.sampled_from(["session", "day"]),
)


@settings(max_examples=300)
@given(record_fields)
def test_a_data_key_record_is_json_dumps_sorted_bytes_for_any_fields(
    fields: tuple[str, str, str, bytes, bytes, int, Any],
) -> None:
    data_key_id, session_id, kek_id, nonce, wrapped, created_at_ms, period = fields
    record = DataKeyRecord(
        data_key_id, session_id, WrappedKey(kek_id, nonce, wrapped), created_at_ms, period
    )
    reference = json.dumps(
        {
            "data_key_id": data_key_id,
            "session_id": session_id,
            "kek_id": kek_id,
            "nonce": base64.b64encode(nonce).decode(),
            "wrapped": base64.b64encode(wrapped).decode(),
            "created_at_ms": created_at_ms,
            "period": period,
        },
        sort_keys=True,
    ).encode()
    assert record.encode() == reference
    assert DataKeyRecord.decode(record.encode()) == record


def _nonces_of(turns: int, session: str, keys: Any) -> list[bytes]:
    nonces = []
    for sequence in range(turns):
        event = v5_turn(session, sequence)
        keys.seal(cast(OutgoingTurnEvent, event))
        nonces.append(event["sealed"]["nonce"])
    return nonces


def test_nonces_across_several_draws_from_the_os_are_all_different() -> None:
    keys = sealer(keyring("kek-1"), KeyTopic())
    nonces = _nonces_of(3 * POOL_BYTES // NONCE_BYTES + 5, "s-1", keys)
    assert all(len(nonce) == 12 for nonce in nonces)
    assert len(set(nonces)) == len(nonces)


def test_a_forked_child_sealing_under_its_parents_data_key_uses_none_of_its_nonces() -> None:
    keys = sealer(keyring("kek-1"), KeyTopic())
    _nonces_of(1, "s-1", keys)  # the session's data key made, nonces drawn and held
    readable, writable = os.pipe()
    child = os.fork()
    if child == 0:  # the child: seals under the same data key, reports its nonces
        try:
            os.write(writable, b"".join(_nonces_of(100, "s-1", keys)))
        finally:
            os._exit(0)
    os.close(writable)
    received = b""
    while chunk := os.read(readable, 4096):
        received += chunk
    os.close(readable)
    assert os.waitpid(child, 0)[1] == 0
    in_child = {received[i : i + 12] for i in range(0, len(received), 12)}
    assert len(in_child) == 100
    in_parent = set(_nonces_of(100, "s-1", keys))
    assert in_child.isdisjoint(in_parent)


def test_a_forked_child_makes_data_keys_and_wraps_of_its_own() -> None:
    topic = KeyTopic()
    keys = sealer(keyring("kek-1"), topic)
    _nonces_of(1, "s-1", keys)  # random bytes drawn and held
    readable, writable = os.pipe()
    child = os.fork()
    if child == 0:  # the child: a new session's key record, as it would be stored
        try:
            _nonces_of(1, "s-2", keys)
            os.write(writable, topic.messages[-1][1] or b"")
        finally:
            os._exit(0)
    os.close(writable)
    received = b""
    while chunk := os.read(readable, 4096):
        received += chunk
    os.close(readable)
    assert os.waitpid(child, 0)[1] == 0
    _nonces_of(1, "s-2", keys)
    in_child, in_parent = (
        DataKeyRecord.decode(received),
        DataKeyRecord.decode(topic.messages[-1][1] or b""),
    )
    assert in_child.data_key_id != in_parent.data_key_id
    assert in_child.wrapped.nonce != in_parent.wrapped.nonce
    assert in_child.wrapped.sealed != in_parent.wrapped.sealed


def test_data_keys_and_their_wraps_across_several_draws_are_all_different() -> None:
    topic, provider = KeyTopic(), keyring("kek-1")
    keys = sealer(provider, topic)
    sessions = 3 * POOL_BYTES // (16 + 32 + 2 * NONCE_BYTES) + 5
    for session in range(sessions):
        _nonces_of(1, f"s-{session}", keys)
    records = [DataKeyRecord.decode(value or b"") for _, value in topic.messages]
    assert len(records) == sessions
    assert len({r.data_key_id for r in records}) == sessions
    assert len({r.wrapped.nonce for r in records}) == sessions
    data_keys = {provider.unwrap(r.session_id, r.data_key_id, r.wrapped) for r in records}
    assert len(data_keys) == sessions


@given(st.lists(st.integers(8, 2 * POOL_BYTES), min_size=2, max_size=60))
def test_a_random_pool_never_hands_out_a_byte_twice_for_any_sizes_taken(
    sizes: list[int],
) -> None:
    pool = RandomPool()
    taken = [pool.take(size) for size in sizes]
    assert [len(chunk) for chunk in taken] == sizes
    for i, chunk in enumerate(taken):  # 8 random bytes shared: a slice handed out twice
        others = b"|".join(taken[:i] + taken[i + 1 :])
        assert chunk[:8] not in others
        assert chunk[-8:] not in others
