"""docs/trust.md's key command and keyring, as written: the command makes a key pair and a
keyring entry verify accepts, and the guide's keyring, its placeholders filled with real
keys, is read as the guide says."""

from __future__ import annotations

import re
import shlex
import stat
from datetime import UTC, datetime
from pathlib import Path

from tests.support import PROJECT_ROOT
from tests.support.cli import run_turnaudit
from turnaudit.keyring import parse_keyring
from turnaudit.signing_keys import generate_keys, load_signing_key

GUIDE = (PROJECT_ROOT / "docs" / "trust.md").read_text()
# The guide's stand-in for a public key, as it stands in a TOML string.
PEM_PLACEHOLDER = '"-----BEGIN PUBLIC KEY-----\\n…\\n-----END PUBLIC KEY-----\\n"'


def guide_block(info: str, holding: str) -> str:
    found = [
        body
        for body in re.findall(rf"^```{info}\n(.*?)^```", GUIDE, re.DOTALL | re.MULTILINE)
        if holding in body
    ]
    assert len(found) == 1, f"docs/trust.md has no one ```{info} block with {holding!r}"
    return found[0]


def toml_string(pem: str) -> str:
    return '"' + pem.strip().replace("\n", "\\n") + '\\n"'


def test_the_guides_keys_generate_writes_an_owner_only_pair_and_an_entry_verify_reads(
    tmp_path: Path,
) -> None:
    argv = shlex.split(guide_block("", "turnaudit keys generate"))
    assert argv[:3] == ["turnaudit", "keys", "generate"]
    key_id = argv[argv.index("--key-id") + 1]
    out = tmp_path / argv[argv.index("--out") + 1]
    ran = run_turnaudit(*argv[1:], cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stderr
    private, public = out / f"{key_id}.key", out / f"{key_id}.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    signing = load_signing_key(private, key_id)
    assert public.read_text() == signing.public_pem()
    written = private.read_bytes()
    # What it prints is the keyring entry for that very key.
    keyring = parse_keyring(ran.stdout, "printed")
    assert list(keyring.keys) == [key_id]
    assert keyring.keys[key_id].public_key.public_bytes_raw() == (
        signing.public_key().public_bytes_raw()
    )
    again = run_turnaudit(*argv[1:], cwd=tmp_path, timeout=60)
    assert again.returncode == 2
    assert "exists already" in again.stderr
    assert private.read_bytes() == written  # a key is never overwritten


def test_the_guides_keyring_with_real_keys_for_its_placeholders_is_read_as_it_says(
    tmp_path: Path,
) -> None:
    text = guide_block("toml", "[keys.")
    assert text.count(PEM_PLACEHOLDER) == 2
    made = {key_id: generate_keys(tmp_path, key_id) for key_id in ("old", "new")}
    for key in made.values():
        text = text.replace(PEM_PLACEHOLDER, toml_string(key.public_path.read_text()), 1)
    keyring = parse_keyring(text.replace('"…"', '"fleet-b"'), "docs/trust.md")

    assert keyring.require_signed
    assert list(keyring.keys) == ["runtime-2026-06", "runtime-2026-12"]
    old, new = keyring.keys["runtime-2026-06"], keyring.keys["runtime-2026-12"]
    assert old.valid_at(datetime(2026, 12, 5, 8, 59, tzinfo=UTC))
    assert not old.valid_at(datetime(2026, 12, 5, 9, 0, tzinfo=UTC))  # revoked_at
    assert new.revoked_at is None
    assert not new.valid_at(datetime(2026, 12, 3, tzinfo=UTC))  # before valid_from
    for entry, (key_id, key) in zip((old, new), made.items(), strict=True):
        assert entry.public_key.public_bytes_raw() == (
            load_signing_key(key.private_path, key_id).public_key().public_bytes_raw()
        )
    (allowance,) = keyring.allow_unsigned
    assert allowance.producer_id == "fleet-b"
    assert allowance.until == datetime(2027, 1, 1, tzinfo=UTC)
    assert allowance.reason == "fleet B gets keys in December"
