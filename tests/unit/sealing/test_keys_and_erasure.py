"""Data keys and KEKs: erasure of any subset of sessions leaves exactly the others
readable; a rotated keyring still opens what the old KEK wrapped; a reader without a
keyring sees verdicts and placeholders and never fails; a bad keyring is one line."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.sealing.support import (
    KeyTopic,
    keyring,
    keyring_text,
    sealed_copy,
    sealer,
    v5_turn,
)
from turnaudit.contracts import check_event
from turnaudit.errors import ConfigurationError, SerializationError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.sealing import (
    DataKeyRecord,
    FileKeyring,
    KeyDirectory,
    Opened,
    Sealed,
    SessionKeys,
    WrappedKey,
    placeholder,
    provider_from_env,
)
from turnaudit.sealing.data_keys import KeyRecordError
from turnaudit.sealing.envelope import surfaces_of
from turnaudit.verdicts import UNKNOWN_DOMAIN_SURFACE


@given(
    st.lists(st.text(max_size=12), min_size=1, max_size=8, unique=True),
    st.data(),
)
def test_erasing_any_subset_of_sessions_leaves_exactly_the_others_readable(
    sessions: list[str], data: st.DataObject
) -> None:
    topic = KeyTopic()
    provider = keyring("kek-1")
    keys = sealer(provider, topic)
    turns = {
        s: [sealed_copy(keys, v5_turn(s, n, surface=f"{s}:{n}")) for n in range(2)]
        for s in sessions
    }
    erased = set(data.draw(st.sets(st.sampled_from(sessions))))
    for session in erased:  # what `turnaudit erase` does: a tombstone per data key
        for record in topic.directory(None).records_of(session):
            topic.tombstone(record.data_key_id)
    directory = topic.directory(provider)
    for session, sealed in turns.items():
        for n, event in enumerate(sealed):
            state = directory.open_in_place(event)
            if session in erased:
                assert state == Sealed("key_erased")
                assert event["surface"] == placeholder("key_erased")
            else:
                assert isinstance(state, Opened)
                assert event["surface"] == f"{session}:{n}"


def test_one_data_key_per_session_is_made_and_stored_before_its_turns() -> None:
    topic = KeyTopic()
    keys = sealer(keyring("kek-1"), topic)
    for n in range(3):
        sealed_copy(keys, v5_turn("a", n))
        sealed_copy(keys, v5_turn("b", n))
    assert keys.made == 2
    assert sorted(r.session_id for r in topic.directory(None).records_of("a")) == ["a"]
    assert len(topic.messages) == 2


def test_an_evicted_session_gets_a_new_data_key_and_both_open() -> None:
    topic = KeyTopic()
    provider = keyring("kek-1")
    # One cached session: every switch of session evicts the other's key.
    keys = SessionKeys(provider, topic.store, clock_ms=lambda: 0, max_sessions=1)
    turns = [sealed_copy(keys, v5_turn(s, n, surface=f"{s}{n}")) for n in range(2) for s in "ab"]
    assert keys.made == 4
    directory = topic.directory(provider)
    assert [isinstance(directory.open_in_place(t), Opened) for t in turns] == [True] * 4
    assert [t["surface"] for t in turns] == ["a0", "b0", "a1", "b1"]


def test_a_rotated_keyring_opens_old_and_new_and_a_keyring_without_the_old_kek_does_not() -> None:
    old, new = os.urandom(32), os.urandom(32)
    topic = KeyTopic()
    before = FileKeyring({"kek-1": old}, "kek-1")
    first = sealed_copy(sealer(before, topic), v5_turn("s-old", surface="old"))
    rotated = FileKeyring({"kek-1": old, "kek-2": new}, "kek-2")
    second = sealed_copy(sealer(rotated, topic), v5_turn("s-new", surface="new"))
    assert [r.wrapped.kek_id for r in topic.directory(None).records_of("s-new")] == ["kek-2"]
    both = topic.directory(rotated)
    assert isinstance(both.open_in_place(first), Opened)
    assert isinstance(both.open_in_place(second), Opened)
    assert (first["surface"], second["surface"]) == ("old", "new")
    only_new = topic.directory(FileKeyring({"kek-2": new}, "kek-2"))
    again = sealed_copy(sealer(before, KeyTopic()), v5_turn("x"))
    assert only_new.open_in_place(again) == Sealed("key_erased")  # its key is elsewhere
    old_turn = sealed_copy(sealer(before, topic), v5_turn("s-old2", surface="old2"))
    assert topic.directory(FileKeyring({"kek-2": new}, "kek-2")).open_in_place(old_turn) == Sealed(
        "kek_unknown"
    )


def test_without_a_keyring_a_reader_sees_placeholders_and_the_stub_contract_holds() -> None:
    topic = KeyTopic()
    keys = sealer(keyring("kek-1"), topic)
    main = sealed_copy(keys, v5_turn("s", 0, tools=(("q", "r"),)))
    stub = v5_turn("s", 1)
    stub.update(
        path="STUB",
        surface=UNKNOWN_DOMAIN_SURFACE,
        walk_surface=UNKNOWN_DOMAIN_SURFACE,
        articulation_surface=UNKNOWN_DOMAIN_SURFACE,
        identity_score=None,
        cycle_cost_total=0.0,
        vault_hits=0,
        flagged=False,
    )
    stub["verdicts"] = {**stub["verdicts"], "identity_score": None, "hedge_injected": False}
    assert check_event(cast(OutgoingTurnEvent, stub)) == []
    sealed_stub = sealed_copy(keys, stub)
    blind = topic.directory(None)
    for event in (main, sealed_stub):
        verdicts = dict(event["verdicts"])
        assert blind.open_in_place(event) == Sealed("no_keyring")
        assert event["verdicts"] == verdicts
    assert set(surfaces_of(main).texts()) == {placeholder("no_keyring")}
    # The stub text is no one's words: left in the clear, so the contract still holds.
    assert check_event(sealed_stub) == []
    assert sealed_stub["walk_surface"] == UNKNOWN_DOMAIN_SURFACE


def test_an_unsealed_turn_is_left_as_it_is() -> None:
    event = v5_turn()
    event["sealed"] = None
    before = dict(event)
    assert KeyDirectory(keyring("k")).open_in_place(cast(Any, event)) is None
    assert event == before


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_a_turn_of_a_version_without_sealed_is_refused_never_written_in_the_clear(
    version: int,
) -> None:
    event = v5_turn()
    event["verdicts"]["schema_version"] = version
    before = dict(event)
    with pytest.raises(SerializationError, match=f"v{version}"):
        sealer(keyring("k"), KeyTopic()).seal(cast(OutgoingTurnEvent, event))
    assert event == before


@given(st.text(max_size=20), st.binary(min_size=12, max_size=12), st.binary(max_size=64))
def test_a_data_key_record_reads_back_as_written(session: str, nonce: bytes, sealed: bytes) -> None:
    record = DataKeyRecord("d" * 32, session, WrappedKey("kek-1", nonce, sealed), 17)
    assert DataKeyRecord.decode(record.encode()) == record


@pytest.mark.parametrize("value", [b"", b"{}", b"[1]", b'{"data_key_id": 1}', b"\xff"])
def test_a_value_that_is_not_a_key_record_is_refused_and_left_out(value: bytes) -> None:
    with pytest.raises(KeyRecordError):
        DataKeyRecord.decode(value)
    directory = KeyDirectory(None)
    directory.apply(b"k", value)
    assert len(directory) == 0


SECRET = base64.b64encode(bytes(32)).decode()
BAD_KEYRINGS = {
    "not toml": ("active = ", "not TOML"),
    "no active": (f'[keys]\nk = "{SECRET}"\n', "'active' must name a key id"),
    "no keys": ('active = "k"\n', "[keys] table"),
    "active missing": (f'active = "x"\n[keys]\nk = "{SECRET}"\n', "active key 'x'"),
    "short key": ('active = "k"\n[keys]\nk = "AAAA"\n', "base64 of 32 bytes"),
    "not base64": ('active = "k"\n[keys]\nk = "!!"\n', "base64 of 32 bytes"),
    "not utf-8": ("\udcff", "not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(BAD_KEYRINGS))
def test_a_bad_keyring_is_one_line_naming_the_setting(tmp_path: Path, name: str) -> None:
    text, says = BAD_KEYRINGS[name]
    path = tmp_path / "kek.toml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    path.chmod(0o600)
    with pytest.raises(ConfigurationError) as raised:
        provider_from_env({"TURNAUDIT_SURFACE_KEYRING": str(path)})
    message = str(raised.value)
    assert "\n" not in message
    assert says in message
    assert "TURNAUDIT_SURFACE_KEYRING" in message


def test_a_missing_or_readable_keyring_is_one_line_and_an_unset_setting_is_no_sealing(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigurationError, match=r"TURNAUDIT_SURFACE_KEYRING=.*missing"):
        provider_from_env({"TURNAUDIT_SURFACE_KEYRING": str(tmp_path / "missing")})
    assert provider_from_env({}) is None
    assert provider_from_env({"TURNAUDIT_SURFACE_KEYRING": "  "}) is None
    path = tmp_path / "kek.toml"
    path.write_text(keyring_text({"a": bytes(32), "b": bytes(range(32))}, "b"))
    path.chmod(0o640)
    with pytest.raises(ConfigurationError, match=r"readable by group or others \(mode 0640\)"):
        provider_from_env({"TURNAUDIT_SURFACE_KEYRING": str(path)})
    path.chmod(0o600)
    loaded = provider_from_env({"TURNAUDIT_SURFACE_KEYRING": str(path)})
    assert loaded is not None
    assert (loaded.active_key_id, loaded.key_ids) == ("b", frozenset({"a", "b"}))
