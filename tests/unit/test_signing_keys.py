"""Key files for signed checkpoints: the private key is refused when group or others may
read it; a key pair is written owner-only; the settings refuse a key without an id; and
no private key material ever appears in an error, a log line or a repr (hypothesis over
key material and over the ways a key file can be wrong)."""

from __future__ import annotations

import base64
import os
import pickle
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from tests.support.checkpoints import RecordingProducer
from turnaudit.checkpoints import parse_keyring
from turnaudit.errors import ConfigurationError
from turnaudit.producers.checkpointer import Checkpointer
from turnaudit.signing_keys import (
    CheckpointSettings,
    generate_keys,
    load_keyring,
    load_signing_key,
)
from turnaudit.stream_heads import StreamHead


def secrets_of(seed: bytes) -> tuple[Ed25519PrivateKey, list[str]]:
    """A key and every form its private material could leak in."""
    key = Ed25519PrivateKey.from_private_bytes(seed)
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    der = key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
    body = "".join(pem.strip().splitlines()[1:-1])
    # (the first characters of the body are PKCS#8's fixed header, shared by every key)
    forms = [
        pem.strip(),
        body,
        body[-24:],
        seed.hex(),
        base64.b64encode(seed).decode(),
        base64.b64encode(der).decode(),
        repr(seed),
        repr(der),
    ]
    return key, forms


def assert_hidden(text: str, forms: list[str]) -> None:
    for form in forms:
        assert form not in text, "private key material leaked"


# How a key file can be wrong: its mode, and what is in it.
MODES = st.sampled_from([0o600, 0o400, 0o640, 0o644, 0o604, 0o660, 0o606, 0o666])
DAMAGE = st.sampled_from(["none", "truncate", "flip", "wrap", "tail", "der"])


def damaged(pem: str, der: bytes, how: str, cut: int) -> bytes:
    if how == "truncate":
        # Cut inside the text: dropping only the trailing newline leaves a whole PEM.
        return pem.encode()[: max(1, cut % len(pem.rstrip()))]
    if how == "flip":
        raw = bytearray(pem.encode())
        raw[40 + cut % 20] ^= 0x01
        return bytes(raw)
    if how == "wrap":
        return b"key: " + pem.encode() + b" end"
    if how == "tail":
        return pem.encode() + b"\x00garbage\xff"
    if how == "der":
        return der
    return pem.encode()


@pytest.fixture
def logs() -> Iterator[list[dict[str, object]]]:
    with capture_logs() as captured:
        yield captured


class TestNoLeaks:
    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        seed=st.binary(min_size=32, max_size=32).filter(lambda b: len(set(b)) > 8),
        mode=MODES,
        how=DAMAGE,
        cut=st.integers(0, 10_000),
        key_id=st.text(min_size=1, max_size=10),
    )
    def test_no_error_log_or_repr_shows_the_private_key(  # noqa: PLR0917 - hypothesis's draws
        self,
        tmp_path: Path,
        seed: bytes,
        mode: int,
        how: str,
        cut: int,
        key_id: str,
    ) -> None:
        key, forms = secrets_of(seed)
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
        der = key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
        path = tmp_path / f"k-{seed.hex()[:8]}-{how}-{mode:o}.pem"
        path.write_bytes(damaged(pem, der, how, cut))
        path.chmod(mode)
        seen: list[str] = []
        with capture_logs() as captured:
            try:
                loaded = load_signing_key(path, key_id)
            except ConfigurationError as exc:
                seen += [str(exc), repr(exc), repr(exc.__cause__), repr(exc.__context__)]
                refusal = str(exc)
                if mode & 0o077:
                    assert "readable by group or others" in refusal
                assert "\n" not in refusal
            else:
                assert not mode & 0o077
                assert how not in ("der", "truncate")
                settings_ = CheckpointSettings(loaded, interval_s=0.01, max_turns=1)
                seen += [repr(loaded), str(loaded), repr(settings_), str(settings_)]
                with pytest.raises(TypeError):
                    pickle.dumps(loaded)
                # The checkpointer's own failures are logged: still no key in them.
                sink = RecordingProducer(full_next=1, fail_next=1)
                w = Checkpointer(settings_, producer_id="p", producer=sink, prefix="t.")
                w.advance([StreamHead("s", "p", 0, "0" * 64)], 1)
                w.tick()
                w.close(0.5)
                seen += [v.decode("latin-1") for _, v, _ in sink.stored]
        seen += [repr(entry) for entry in captured]
        for text in seen:
            assert_hidden(text, forms)

    def test_the_settings_from_the_environment_never_show_the_key(
        self, tmp_path: Path, logs: list[dict[str, object]]
    ) -> None:
        made = generate_keys(tmp_path, "k1")
        pem = made.private_path.read_text()
        settings_ = CheckpointSettings.from_env(
            {"TURNAUDIT_SIGNING_KEY_FILE": str(made.private_path), "TURNAUDIT_SIGNING_KEY_ID": "k1"}
        )
        assert settings_.key is not None
        assert settings_.key.key_id == "k1"
        body = "".join(pem.strip().splitlines()[1:-1])
        for text in (repr(settings_), str(settings_), repr(logs)):
            assert body not in text


class TestKeyFiles:
    @pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
    def test_a_generated_private_key_is_owner_only_whatever_the_umask(
        self, tmp_path: Path, umask: int
    ) -> None:
        old = os.umask(umask)
        try:
            made = generate_keys(tmp_path / "keys", "runtime-1")
        finally:
            os.umask(old)
        assert stat.S_IMODE(made.private_path.stat().st_mode) == 0o600
        key = load_signing_key(made.private_path, "runtime-1")
        ring = parse_keyring(made.keyring_entry)
        assert ring.keys["runtime-1"].public_key.public_bytes_raw() == (
            key.public_key().public_bytes_raw()
        )
        assert made.public_path.read_text() == key.public_pem()

    def test_a_key_is_never_overwritten(self, tmp_path: Path) -> None:
        made = generate_keys(tmp_path, "k")
        before = made.private_path.read_bytes()
        with pytest.raises(ConfigurationError, match=r"k\.key exists already"):
            generate_keys(tmp_path, "k")
        assert made.private_path.read_bytes() == before

    @pytest.mark.parametrize("key_id", ["", "a/b", ".hidden", "nul\x00"])
    def test_a_key_id_that_is_not_a_plain_name_is_refused(
        self, tmp_path: Path, key_id: str
    ) -> None:
        with pytest.raises(ConfigurationError, match="--key-id"):
            generate_keys(tmp_path, key_id)

    def test_a_world_readable_key_is_refused_in_one_line(self, tmp_path: Path) -> None:
        made = generate_keys(tmp_path, "k")
        made.private_path.chmod(0o644)
        with pytest.raises(ConfigurationError) as caught:
            load_signing_key(made.private_path, "k")
        assert str(caught.value) == (
            f"TURNAUDIT_SIGNING_KEY_FILE={made.private_path}: the private key is readable "
            "by group or others (mode 0644): chmod 600 it"
        )

    def test_a_symlink_or_a_folder_is_not_a_key(self, tmp_path: Path) -> None:
        made = generate_keys(tmp_path, "k")
        link = tmp_path / "link.key"
        link.symlink_to(made.private_path)
        with pytest.raises(ConfigurationError, match="cannot read the key file"):
            load_signing_key(link, "k")
        with pytest.raises(ConfigurationError, match="not a regular file"):
            load_signing_key(tmp_path, "k")

    def test_a_public_key_is_not_a_private_key(self, tmp_path: Path) -> None:
        made = generate_keys(tmp_path, "k")
        made.public_path.chmod(0o600)
        with pytest.raises(ConfigurationError, match="not an unencrypted Ed25519 private key"):
            load_signing_key(made.public_path, "k")


class TestSettings:
    @pytest.mark.parametrize(
        ("env", "says"),
        [
            ({"TURNAUDIT_SIGNING_KEY_FILE": "{key}"}, "TURNAUDIT_SIGNING_KEY_ID must name the key"),
            (
                {"TURNAUDIT_SIGNING_KEY_FILE": "{dir}/none", "TURNAUDIT_SIGNING_KEY_ID": "k"},
                "cannot read the key file",
            ),
            ({"TURNAUDIT_CHECKPOINT_INTERVAL_S": "0"}, "expected a number of seconds above 0"),
            ({"TURNAUDIT_CHECKPOINT_INTERVAL_S": "soon"}, "expected a number of seconds above 0"),
            ({"TURNAUDIT_CHECKPOINT_MAX_TURNS": "0"}, "expected a whole number of 1 or more"),
            ({"TURNAUDIT_CHECKPOINT_MAX_TURNS": "1.5"}, "expected a whole number of 1 or more"),
        ],
    )
    def test_settings_that_will_not_do_are_one_line(
        self, tmp_path: Path, env: dict[str, str], says: str
    ) -> None:
        made = generate_keys(tmp_path, "k")
        filled = {
            k: v.replace("{key}", str(made.private_path)).replace("{dir}", str(tmp_path))
            for k, v in env.items()
        }
        with pytest.raises(ConfigurationError, match=says):
            CheckpointSettings.from_env(filled)

    def test_no_key_no_checkpoints(self) -> None:
        assert CheckpointSettings.from_env({}).key is None

    def test_a_keyring_file_that_cannot_be_read_is_one_line(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigurationError, match="cannot read it"):
            load_keyring(tmp_path / "missing.toml")
        (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
        with pytest.raises(ConfigurationError, match="not UTF-8"):
            load_keyring(tmp_path / "bin.toml")


def test_structlog_is_configured_for_the_capture() -> None:
    # capture_logs replaces the processors: the publisher's logger goes through it.
    with capture_logs() as captured:
        structlog.get_logger("turnaudit.publisher").warning("x")
    assert captured[0]["event"] == "x"
