"""Signed checkpoints, the pure part: the canonical form round-trips; any tampering with
any field of a checkpoint, or with its chain, breaks verification; keys are valid only
from ``valid_from`` until ``revoked_at``; a keyring that will not do is one line."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.checkpoint_chain import (
    judge_chain,
    judge_signature,
)
from turnaudit.checkpoints import (
    Checkpoint,
    Keyring,
    SigningKey,
    canonical_heads,
    decode_checkpoint,
    keyring_entry_toml,
    parse_keyring,
    sign,
    signature_holds,
)
from turnaudit.errors import ConfigurationError
from turnaudit.identity import GENESIS_HASH
from turnaudit.stream_heads import StreamHead

KEY = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), "k1")
OTHER = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))), "k1")
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
NOW_MS = 1_790_000_000_000  # 2026-09


def keyring(
    *entries: tuple[SigningKey, datetime, datetime | None], require: bool = False
) -> Keyring:
    text = "require_signed = true\n" if require else ""
    for key, valid_from, revoked in entries:
        text += keyring_entry_toml(key.key_id, key.public_pem(), valid_from)
        if revoked is not None:
            text += f"revoked_at = {revoked.strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
    return parse_keyring(text)


KEYRING = keyring((KEY, LONG_AGO, None))

hexes = st.text("0123456789abcdef", min_size=64, max_size=64)
names = st.text(min_size=1, max_size=12)
heads = st.lists(st.builds(StreamHead, names, names, st.integers(0, 2**40), hexes), max_size=6).map(
    canonical_heads
)
checkpoints = st.builds(
    Checkpoint,
    producer_id=names,
    index=st.integers(0, 10**6),
    prev=hexes,
    at_ms=st.integers(1_577_836_800_000, 2**45),  # from LONG_AGO: the key is valid
    key_id=st.just("k1"),
    final=st.booleans(),
    interval_ms=st.integers(0, 10**7),
    max_turns=st.integers(0, 10**7),
    heads=heads,
    signature=st.just(b""),
    schemas=st.lists(st.text("0123456789abcdef", min_size=16, max_size=16), max_size=3).map(
        lambda s: tuple(sorted(set(s)))
    ),
    prev_at_ms=st.integers(0, 2**45),
    format=st.just(3),
)
# Format 1 (before checkpoints named writer schemas) and 2 (before they said when their
# predecessor was signed): still read and verified as signed.
format_one = checkpoints.map(lambda c: dataclasses.replace(c, schemas=(), prev_at_ms=0, format=1))
format_two = checkpoints.map(lambda c: dataclasses.replace(c, prev_at_ms=0, format=2))


class TestCanonicalForm:
    @given(checkpoints)
    def test_a_signed_checkpoint_round_trips_through_its_record(self, c: Checkpoint) -> None:
        signed = sign(c, KEY)
        back = decode_checkpoint(signed.encode())
        assert back == signed
        assert back.body() == signed.body()
        assert back.digest() == signed.digest()
        assert signature_holds(back, KEY.public_key())

    @given(checkpoints)
    def test_the_body_is_deterministic_ascii(self, c: Checkpoint) -> None:
        assert c.body() == dataclasses.replace(c).body()
        assert c.body().isascii()

    @given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
    def test_anything_else_is_not_a_checkpoint_and_never_raises(self, raw: bytes) -> None:
        assert decode_checkpoint(raw) is None or decode_checkpoint(raw) == decode_checkpoint(raw)

    def test_a_record_with_an_extra_field_or_unsorted_heads_is_refused(self) -> None:
        c = sign(
            Checkpoint(
                "p",
                0,
                GENESIS_HASH,
                NOW_MS,
                "k1",
                False,
                1,
                1,
                (StreamHead("a", "p", 1, "0" * 64), StreamHead("b", "p", 2, "1" * 64)),
            ),
            KEY,
        )
        assert decode_checkpoint(c.encode()) == c
        assert decode_checkpoint(c.encode().replace(b'"v":3', b'"v":3,"x":0')) is None
        swapped = c.encode().replace(b'"a","p",1', b'"c","p",1')
        assert decode_checkpoint(swapped) is None  # heads no longer sorted
        assert decode_checkpoint(None) is None


def _other_value(value: Any, data: st.DataObject) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return data.draw(st.integers(0, 2**45).filter(lambda v: v != value))
    if isinstance(value, str):
        return data.draw(st.text(min_size=1, max_size=64).filter(lambda v: v != value))
    raise AssertionError(type(value))


class TestFormats:
    @given(format_one)
    def test_a_format_one_checkpoint_still_round_trips_and_verifies(self, c: Checkpoint) -> None:
        signed = sign(c, KEY)
        assert b'"v":1' in signed.encode()
        assert b"schemas" not in signed.encode()
        assert decode_checkpoint(signed.encode()) == signed
        assert judge_signature(signed, KEYRING).problem is None

    @given(format_two)
    def test_a_format_two_checkpoint_still_round_trips_and_verifies(self, c: Checkpoint) -> None:
        signed = sign(c, KEY)
        assert b'"v":2' in signed.encode()
        assert b"prev_at_ms" not in signed.encode()
        assert decode_checkpoint(signed.encode()) == signed
        assert judge_signature(signed, KEYRING).problem is None

    @given(format_two)
    def test_a_format_two_checkpoint_cannot_pass_for_format_one(self, c: Checkpoint) -> None:
        signed = sign(c, KEY)
        downgraded = dataclasses.replace(signed, format=1, schemas=())
        assert not signature_holds(downgraded, KEY.public_key())

    @given(checkpoints)
    def test_a_format_three_checkpoint_cannot_pass_for_an_earlier_one(self, c: Checkpoint) -> None:
        signed = sign(c, KEY)
        for earlier in (1, 2):
            downgraded = dataclasses.replace(signed, format=earlier, prev_at_ms=0)
            assert not signature_holds(downgraded, KEY.public_key())
        without = json.loads(signed.encode())
        del without["prev_at_ms"]
        assert decode_checkpoint(json.dumps(without)) is None  # format 3 names it

    def test_unsorted_or_repeated_schemas_are_not_a_checkpoint(self) -> None:
        c = sign(
            Checkpoint("p", 0, GENESIS_HASH, NOW_MS, "k1", False, 1, 1, (), schemas=("aa", "bb")),
            KEY,
        )
        assert decode_checkpoint(c.encode()) == c
        for bad in (b'["bb","aa"]', b'["aa","aa"]'):
            assert decode_checkpoint(c.encode().replace(b'["aa","bb"]', bad)) is None


class TestTampering:
    @settings(max_examples=150)
    @given(checkpoints, st.data())
    def test_any_changed_field_breaks_the_signature(
        self, c: Checkpoint, data: st.DataObject
    ) -> None:
        signed = sign(c, KEY)
        name = data.draw(
            st.sampled_from(
                [
                    "producer_id",
                    "index",
                    "prev",
                    "at_ms",
                    "final",
                    "interval_ms",
                    "max_turns",
                    "heads",
                    "schemas",
                    "prev_at_ms",
                ]
            )
        )
        if name == "schemas":
            extra = data.draw(st.text("0123456789abcdef", min_size=16, max_size=16))
            # one schema named more, or one fewer
            toggled = tuple(sorted(set(signed.schemas) ^ {extra}))
            tampered = dataclasses.replace(signed, schemas=toggled)
        elif name == "heads":
            tampered_heads = data.draw(heads.filter(lambda h: h != signed.heads))
            tampered = dataclasses.replace(signed, heads=tampered_heads)
        else:
            tampered = dataclasses.replace(
                signed, **{name: _other_value(getattr(signed, name), data)}
            )
        assert not signature_holds(tampered, KEY.public_key())
        # (a changed signing time may also fall outside the key's validity)
        assert judge_signature(tampered, KEYRING).problem in ("bad_signature", "key_not_valid")
        assert judge_signature(signed, KEYRING).problem is None

    @given(checkpoints, st.data())
    def test_any_changed_head_field_breaks_the_signature(
        self, c: Checkpoint, data: st.DataObject
    ) -> None:
        if not c.heads:
            c = dataclasses.replace(c, heads=(StreamHead("s", "p", 3, "a" * 64),))
        signed = sign(c, KEY)
        i = data.draw(st.integers(0, len(signed.heads) - 1))
        field = data.draw(st.sampled_from(["session_id", "producer_id", "sequence", "hash"]))
        head = signed.heads[i]
        changed = dataclasses.replace(head, **{field: _other_value(getattr(head, field), data)})
        tampered = dataclasses.replace(
            signed, heads=(*signed.heads[:i], changed, *signed.heads[i + 1 :])
        )
        assert not signature_holds(tampered, KEY.public_key())

    @given(checkpoints, st.integers(0, 63), st.integers(0, 7))
    def test_a_flipped_signature_bit_or_another_key_fails(
        self, c: Checkpoint, byte: int, bit: int
    ) -> None:
        signed = sign(c, KEY)
        flipped = bytearray(signed.signature)
        flipped[byte] ^= 1 << bit
        assert not signature_holds(
            dataclasses.replace(signed, signature=bytes(flipped)), KEY.public_key()
        )
        assert judge_signature(sign(c, OTHER), KEYRING).problem == "bad_signature"
        renamed = dataclasses.replace(signed, key_id="k2")
        assert judge_signature(renamed, KEYRING).problem == "unknown_key"


def chain(length: int, producer: str = "p", *, final: bool = True) -> list[Checkpoint]:
    out: list[Checkpoint] = []
    prev = GENESIS_HASH
    for i in range(length):
        c = sign(
            Checkpoint(
                producer,
                i,
                prev,
                NOW_MS + i,
                "k1",
                final and i == length - 1,
                1000,
                100,
                (StreamHead(f"s{i}", producer, i, "ab" * 32),),
            ),
            KEY,
        )
        out.append(c)
        prev = c.digest()
    return out


def read(cs: list[Checkpoint]) -> list[tuple[Checkpoint, int | None]]:
    return [(c, None) for c in cs]


class TestChain:
    @given(st.integers(1, 8), st.permutations(range(8)))
    def test_an_intact_chain_is_valid_in_any_order_and_closed(
        self, length: int, order: list[int]
    ) -> None:
        cs = chain(length)
        shuffled = [cs[i] for i in order if i < length]
        report = judge_chain(read(shuffled + shuffled[:2]), KEYRING)  # copies count once
        assert report.invalid() == []
        assert len(report.valid()) == length
        assert report.closed == {"p"}

    @given(st.integers(3, 8), st.data())
    def test_a_removed_checkpoint_breaks_its_successor(
        self, length: int, data: st.DataObject
    ) -> None:
        cs = chain(length)
        gone = data.draw(st.integers(0, length - 2))
        report = judge_chain(read(cs[:gone] + cs[gone + 1 :]), KEYRING)
        assert [(j.checkpoint.index, j.problem) for j in report.invalid()] == [
            (gone + 1, "chain_break")
        ]
        # The part before the hole ends without a final checkpoint: not a clean close
        # (unless the hole is at the start: then no valid chain end is left but the final).
        assert report.closed == (frozenset({"p"}) if gone == 0 else frozenset())

    @given(st.integers(2, 6), st.data())
    def test_a_resigned_link_to_another_place_breaks(
        self, length: int, data: st.DataObject
    ) -> None:
        cs = chain(length)
        i = data.draw(st.integers(1, length - 1))
        relinked = sign(dataclasses.replace(cs[i], index=cs[i].index + 1), KEY)
        report = judge_chain(read([*cs[:i], relinked, *cs[i + 1 :]]), KEYRING)
        assert any(j.problem == "chain_break" for j in report.invalid())

    def test_a_chain_without_a_final_checkpoint_is_not_closed(self) -> None:
        report = judge_chain(read(chain(3, final=False) + chain(2, "q")), KEYRING)
        assert report.invalid() == []
        assert report.closed == {"q"}

    def test_a_first_checkpoint_must_start_from_genesis(self) -> None:
        first = sign(dataclasses.replace(chain(1)[0], prev="1" * 64), KEY)
        assert [j.problem for j in judge_chain(read([first]), KEYRING).invalid()] == ["chain_break"]


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class TestRotationAndRevocation:
    # valid_from, revoked_at, signed at, appended at -> problem
    TABLE: ClassVar[
        list[tuple[datetime, datetime | None, datetime, datetime | None, str | None]]
    ] = [
        (T0, None, T0, None, None),
        (T0, None, T0 - timedelta(seconds=1), None, "key_not_valid"),  # before valid_from
        (T0, T0 + timedelta(days=30), T0 + timedelta(days=1), None, None),
        (T0, T0 + timedelta(days=30), T0 + timedelta(days=30), None, "key_not_valid"),
        (T0, T0 + timedelta(days=30), T0 + timedelta(days=31), None, "key_not_valid"),
        # Backdated by the holder of a revoked key: the broker's append time gives it away.
        (
            T0,
            T0 + timedelta(days=30),
            T0 + timedelta(days=1),
            T0 + timedelta(days=40),
            "key_not_valid",
        ),
        (T0, T0 + timedelta(days=30), T0 + timedelta(days=1), T0 + timedelta(days=1), None),
    ]

    @pytest.mark.parametrize(("valid_from", "revoked", "signed", "appended", "problem"), TABLE)
    def test_validity_by_date(
        self,
        valid_from: datetime,
        revoked: datetime | None,
        signed: datetime,
        appended: datetime | None,
        problem: str | None,
    ) -> None:
        ring = keyring((KEY, valid_from, revoked))
        c = sign(Checkpoint("p", 0, GENESIS_HASH, ms(signed), "k1", True, 1, 1, ()), KEY)
        got = judge_signature(c, ring, None if appended is None else ms(appended))
        assert got.problem == problem

    def test_rotation_two_keys_each_in_its_time(self) -> None:
        new = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(2, 34))), "k2")
        switch = T0 + timedelta(days=90)
        ring = keyring((KEY, T0, switch), (new, switch - timedelta(days=1), None))
        before = sign(
            Checkpoint("p", 0, GENESIS_HASH, ms(T0 + timedelta(days=1)), "", False, 1, 1, ()), KEY
        )
        after = sign(
            Checkpoint("p", 0, GENESIS_HASH, ms(switch + timedelta(days=1)), "", False, 1, 1, ()),
            new,
        )
        late_old = sign(dataclasses.replace(after, key_id=""), KEY)
        assert judge_signature(before, ring).problem is None
        assert judge_signature(after, ring).problem is None
        assert judge_signature(late_old, ring).problem == "key_not_valid"


class TestKeyringFile:
    GOOD = keyring_entry_toml("k1", KEY.public_pem(), LONG_AGO)

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("not = [toml", "not TOML"),
            ("", "no [keys.<key id>] table"),
            ("require_signed = 3\n" + GOOD, "require_signed must be true or false"),
            ("colour = 1\n" + GOOD, "unknown setting(s) ['colour']"),
            ("[keys.k1]\nvalid_from = 2020-01-01T00:00:00Z\n", "public_key (PEM) is missing"),
            (
                '[keys.k1]\npublic_key = "nope"\nvalid_from = 2020-01-01T00:00:00Z\n',
                "not an Ed25519 public key",
            ),
            (GOOD.replace("valid_from = 2020-01-01T00:00:00Z\n", ""), "valid_from is missing"),
            (GOOD.replace("2020-01-01T00:00:00Z", "2020-01-01T00:00:00"), "with its offset"),
            (GOOD.replace("2020-01-01T00:00:00Z", '"soon"'), "not an ISO 8601 time"),
            (GOOD + "revoked_at = 2019-01-01T00:00:00Z\n", "revoked_at is not after valid_from"),
            (GOOD + "owner = 'x'\n", "unknown setting(s) ['owner']"),
        ],
    )
    def test_a_keyring_that_will_not_do_is_one_line(self, text: str, says: str) -> None:
        with pytest.raises(ConfigurationError) as caught:
            parse_keyring(text, source="ring.toml")
        assert says in str(caught.value)
        assert str(caught.value).startswith("ring.toml")
        assert "\n" not in str(caught.value)

    def test_a_good_keyring_reads_back(self) -> None:
        ring = parse_keyring("require_signed = true\n" + self.GOOD)
        assert ring.require_signed
        assert ring.keys["k1"].valid_from == LONG_AGO
        assert ring.keys["k1"].revoked_at is None
