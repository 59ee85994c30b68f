"""Sealed surfaces (docs/privacy.md): a turn's surfaces and tool texts encrypted with
AES-256-GCM under a per-session data key, wrapped by a key-encryption key.

``keys`` holds the KEKs (the provider protocol, the file keyring), ``envelope`` seals and
opens one turn, ``data_keys`` makes and finds data keys, ``key_topic`` keeps them on
``<prefix>surface-keys`` and erases a session's. Everything a reader needs is here."""

from turnaudit.sealing.data_keys import DataKeyRecord, KeyDirectory, SessionKeys
from turnaudit.sealing.envelope import (
    SEALED_REASONS,
    Opened,
    Sealed,
    SealedReason,
    SealState,
    Surfaces,
    placeholder,
)
from turnaudit.sealing.keys import (
    SURFACE_KEYRING_ENV,
    FileKeyring,
    KeyUnavailableError,
    SurfaceKeyProvider,
    WrappedKey,
    provider_from_env,
)

__all__ = [
    "SEALED_REASONS",
    "SURFACE_KEYRING_ENV",
    "DataKeyRecord",
    "FileKeyring",
    "KeyDirectory",
    "KeyUnavailableError",
    "Opened",
    "SealState",
    "Sealed",
    "SealedReason",
    "SessionKeys",
    "SurfaceKeyProvider",
    "Surfaces",
    "WrappedKey",
    "placeholder",
    "provider_from_env",
]
