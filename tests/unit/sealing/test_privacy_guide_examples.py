"""docs/privacy.md's keyring and key command, as written: the guide's keyring, its
placeholders filled with real keys, is read as the guide says, and the command it gives
for a new key prints one the keyring takes."""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
import sys

from tests.support import PROJECT_ROOT
from turnaudit.sealing import FileKeyring

GUIDE = (PROJECT_ROOT / "docs" / "privacy.md").read_text()
PLACEHOLDER = '"<base64 of 32 random bytes>"'


def guide_block(info: str, holding: str) -> str:
    found = [
        body
        for body in re.findall(rf"^```{info}\n(.*?)^```", GUIDE, re.DOTALL | re.MULTILINE)
        if holding in body
    ]
    assert len(found) == 1, f"docs/privacy.md has no one ```{info} block with {holding!r}"
    return found[0]


def test_the_guides_keyring_with_real_keys_is_read_as_it_says() -> None:
    text = guide_block("toml", "active =")
    assert text.count(PLACEHOLDER) == 2
    secrets = [os.urandom(32), os.urandom(32)]
    for secret in secrets:
        text = text.replace(PLACEHOLDER, f'"{base64.b64encode(secret).decode()}"', 1)
    keyring = FileKeyring.parse(text, "docs/privacy.md")
    assert keyring.active_key_id == "kek-2026-12"
    assert keyring.key_ids == {"kek-2026-11", "kek-2026-12"}
    # The active key wraps, and an older one still unwraps what it wrapped.
    older = FileKeyring({"kek-2026-11": secrets[0]}, "kek-2026-11")
    wrapped = older.wrap("s", "d", bytes(32))
    assert keyring.unwrap("s", "d", wrapped) == bytes(32)
    assert keyring.wrap("s", "d", bytes(32)).kek_id == "kek-2026-12"


def test_the_guides_new_kek_command_prints_a_key_the_keyring_takes() -> None:
    argv = shlex.split(guide_block("sh", "os.urandom(32)"))
    assert argv[:2] == ["python3", "-c"]
    printed = {
        subprocess.run(
            [sys.executable, *argv[1:]], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(printed) == 2  # random: two runs, two keys
    for key in printed:
        assert len(base64.b64decode(key, validate=True)) == 32
        FileKeyring.parse(f'active = "k"\n[keys]\nk = "{key}"\n', "printed")
