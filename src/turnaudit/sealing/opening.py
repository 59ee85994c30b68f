"""Every reader's one way to open sealed turns before its surface policy applies.

``TurnOpener`` opens a decoded turn's sealed surfaces into its fields (``Opened``) or
writes placeholders there (``Sealed(reason)``); a reader then redacts as it always did.
The key topic is read on the first sealed turn only, and only by a reader that holds a
keyring and whose policy writes surfaces at all (``drop`` writes none: nothing to open,
no key to read). A sealed turn never makes a reader fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

from turnaudit.events import TurnEvent
from turnaudit.redaction import DROPPED, Redaction, SurfacePolicy
from turnaudit.sealing.data_keys import KeyDirectory
from turnaudit.sealing.envelope import SealState
from turnaudit.sealing.key_topic import reader_directory
from turnaudit.sealing.keys import SurfaceKeyProvider, provider_from_env
from turnaudit.settings import KafkaSettings


class TurnOpener:
    """Opens sealed turns in place with the key directory ``keys`` makes (called once, on
    the first sealed turn); placeholders when ``keys`` is None (no keyring)."""

    def __init__(self, keys: Callable[[], KeyDirectory] | None) -> None:
        self._keys = keys
        self._directory: KeyDirectory | None = None

    def __call__(self, event: TurnEvent | dict[str, Any]) -> SealState | None:
        """The turn's sealing after opening (None: not sealed); its fields now hold the
        texts, or ``[sealed: <reason>]``. ``event``: a decoder's record (a plain dict
        holding a TurnEvent's fields) or a TurnEvent."""
        if event.get("sealed") is None:
            return None
        directory = self._directory
        if directory is None:
            directory = self._directory = KeyDirectory(None) if self._keys is None else self._keys()
        return directory.open_in_place(cast(TurnEvent, event))


def turn_opener(
    settings: KafkaSettings,
    surfaces: Redaction = DROPPED,
    provider: SurfaceKeyProvider | Literal["env"] | None = "env",
) -> TurnOpener | None:
    """A reader's opener: None when its policy writes no surface (``drop``); else one
    that opens with ``provider`` (default: the keyring ``TURNAUDIT_SURFACE_KEYRING``
    names) or, without a keyring, writes placeholders. The keyring is read now, under
    any policy: a bad file stops the reader at start (``ConfigurationError``, one line)."""
    if provider == "env":
        provider = provider_from_env()
    if surfaces.policy is SurfacePolicy.DROP:
        return None
    if provider is None:
        return TurnOpener(None)
    held = provider
    return TurnOpener(lambda: reader_directory(settings, held))
