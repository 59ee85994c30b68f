"""The signed-checkpoint rows of the CLI error table (tests/unit/test_cli_errors.py):
``verify --keyring/--require-signed/--follow``, ``keys generate`` and a publisher's signing
settings, with the key files and keyrings they read."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import Case
from turnaudit.local_broker import free_port
from turnaudit.signing_keys import generate_keys

NOWHERE = {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}
SIGNING = {**NOWHERE, "TURNAUDIT_SIGNING_KEY_ID": "k"}

TRUST_CASES = [
    Case(
        "verify --require-signed without --keyring",
        ["verify", "--require-signed"],
        NOWHERE,
        2,
        "--require-signed needs --keyring FILE",
    ),
    Case(
        "verify --keyring missing",
        ["verify", "--keyring", "{tmp}/missing.toml"],
        NOWHERE,
        2,
        "--keyring {tmp}/missing.toml: cannot read it: No such file or directory",
    ),
    Case(
        "verify --keyring not TOML",
        ["verify", "--keyring", "{tmp}/a-file"],
        NOWHERE,
        2,
        "--keyring {tmp}/a-file: not TOML",
    ),
    Case(
        "verify --keyring a key without valid_from",
        ["verify", "--keyring", "{tmp}/no-date.toml"],
        NOWHERE,
        2,
        "--keyring {tmp}/no-date.toml: key 'k': valid_from is missing",
    ),
    Case(
        "verify --keyring a key that is not Ed25519",
        ["verify", "--keyring", "{tmp}/not-a-key.toml"],
        NOWHERE,
        2,
        "key 'k': public_key is not an Ed25519 public key in PEM",
    ),
    Case(
        "verify --follow --keyring missing",
        ["verify", "--follow", "--keyring", "{tmp}/missing.toml"],
        NOWHERE,
        2,
        "--keyring {tmp}/missing.toml: cannot read it: No such file or directory",
    ),
    Case(
        "verify --follow --require-signed without --keyring",
        ["verify", "--follow", "--require-signed"],
        NOWHERE,
        2,
        "--require-signed needs --keyring FILE",
    ),
    Case(
        "verify --follow --keyring --trust-grace -1",
        ["verify", "--follow", "--keyring", "{tmp}/k.toml", "--trust-grace", "-1"],
        NOWHERE,
        2,
        "the trust grace must be 0 or more seconds, not -1.0",
    ),
    Case(
        "verify --follow --keyring, TURNAUDIT_CHECKPOINT_INTERVAL_S=soon",
        ["verify", "--follow", "--keyring", "{tmp}/k.toml"],
        {**NOWHERE, "TURNAUDIT_CHECKPOINT_INTERVAL_S": "soon"},
        2,
        "TURNAUDIT_CHECKPOINT_INTERVAL_S='soon': expected a number of seconds",
    ),
    Case(
        "verify --trust-grace without --follow",
        ["verify", "--trust-grace", "5"],
        NOWHERE,
        2,
        "--trust-grace is for --follow",
    ),
    Case(
        "verify --follow --trust-grace without --keyring",
        ["verify", "--follow", "--trust-grace", "5"],
        NOWHERE,
        2,
        "--trust-grace needs --keyring FILE",
    ),
    Case(
        "keys generate --key-id a/b",
        ["keys", "generate", "--out", "{tmp}/k", "--key-id", "a/b"],
        {},
        2,
        "--key-id 'a/b': expected a plain name",
    ),
    Case(
        "keys generate --out under a file",
        ["keys", "generate", "--out", "{tmp}/a-file/keys", "--key-id", "k"],
        {},
        2,
        "--out {tmp}/a-file/keys: cannot create the folder",
    ),
    Case(
        "keys generate over an existing key",
        ["keys", "generate", "--out", "{tmp}", "--key-id", "private"],
        {},
        2,
        "private.key exists already: choose another --key-id",
    ),
    Case(
        "keys generate without --out",
        ["keys", "generate", "--key-id", "k"],
        {},
        2,
        "the following arguments are required: --out",
    ),
    Case(
        "simulate: TURNAUDIT_SIGNING_KEY_FILE readable by others",
        ["simulate"],
        {**SIGNING, "TURNAUDIT_SIGNING_KEY_FILE": "{tmp}/open.key"},
        2,
        "TURNAUDIT_SIGNING_KEY_FILE={tmp}/open.key: the private key is readable by group "
        "or others (mode 0644): chmod 600 it",
    ),
    Case(
        "simulate: TURNAUDIT_SIGNING_KEY_FILE not a key",
        ["simulate"],
        {**SIGNING, "TURNAUDIT_SIGNING_KEY_FILE": "{tmp}/private.pub-as-key"},
        2,
        "not an unencrypted Ed25519 private key in PEM",
    ),
    Case(
        "simulate: TURNAUDIT_SIGNING_KEY_FILE without TURNAUDIT_SIGNING_KEY_ID",
        ["simulate"],
        {**NOWHERE, "TURNAUDIT_SIGNING_KEY_FILE": "{tmp}/private.key"},
        2,
        "TURNAUDIT_SIGNING_KEY_ID must name the key",
    ),
    Case(
        "simulate: TURNAUDIT_CHECKPOINT_MAX_TURNS=0",
        ["simulate"],
        {**NOWHERE, "TURNAUDIT_CHECKPOINT_MAX_TURNS": "0"},
        2,
        "TURNAUDIT_CHECKPOINT_MAX_TURNS='0': expected a whole number of 1 or more",
    ),
    Case(
        "simulate: TURNAUDIT_CHECKPOINT_INTERVAL_S=never",
        ["simulate"],
        {**NOWHERE, "TURNAUDIT_CHECKPOINT_INTERVAL_S": "never"},
        2,
        "TURNAUDIT_CHECKPOINT_INTERVAL_S='never': expected a number of seconds above 0",
    ),
]


def trust_files(tmp: Path) -> None:
    (tmp / "a-file").write_text("not a folder")
    made = generate_keys(tmp, "private")
    opened = tmp / "open.key"
    opened.write_bytes(made.private_path.read_bytes())
    opened.chmod(0o644)
    as_key = tmp / "private.pub-as-key"
    as_key.write_bytes(made.public_path.read_bytes())
    as_key.chmod(0o600)
    (tmp / "k.toml").write_text(made.keyring_entry)
    (tmp / "no-date.toml").write_text(
        made.keyring_entry.replace('"private"', "k").split("valid_from")[0]
    )
    (tmp / "not-a-key.toml").write_text(
        '[keys.k]\npublic_key = "-----BEGIN PUBLIC KEY-----\\nAAAA\\n-----END PUBLIC KEY-----'
        '\\n"\nvalid_from = 2026-01-01T00:00:00Z\n'
    )
