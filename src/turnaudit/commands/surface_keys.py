"""``turnaudit surface-keys rewrap``: KEK rotation's second half. Every data key on
``<prefix>surface-keys`` wrapped by a KEK other than the keyring's active one is wrapped
again by the active one, so the old KEK can be retired (docs/privacy.md). The keyring
``TURNAUDIT_SURFACE_KEYRING`` names must hold both."""

from __future__ import annotations

import argparse
import sys

from turnaudit.cluster import connect, require_access
from turnaudit.errors import ConfigurationError
from turnaudit.sealing.keys import SURFACE_KEYRING_ENV, provider_from_env
from turnaudit.sealing.rewrap import rewrap_surface_keys
from turnaudit.settings import KafkaSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("surface-keys", help="the data keys of sealed surfaces")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    rewrap = actions.add_parser(
        "rewrap", help="wrap every data key again by the keyring's active KEK"
    )
    rewrap.set_defaults(handler=_rewrap)


def _rewrap(_: argparse.Namespace) -> int:
    provider = provider_from_env()
    if provider is None:
        raise ConfigurationError(
            f"set {SURFACE_KEYRING_ENV}: the keyring with the active KEK and the ones to retire"
        )
    settings, _where = connect(KafkaSettings.from_env(), start_local=False)
    topic = settings.topics.surface_keys
    require_access(settings, reads=[topic], writes=[topic])
    report = rewrap_surface_keys(settings, provider)
    print(
        f"{report.rewrapped} data key(s) wrapped again by {provider.active_key_id}; "
        f"{report.current} already were; {report.unreadable} under a KEK the keyring lacks "
        f"(left as they are); {report.erased_meanwhile} erased meanwhile (tombstoned again)"
    )
    if report.unreadable:
        print(
            f"turnaudit surface-keys: {report.unreadable} data key(s) are wrapped by a KEK "
            f"the keyring lacks: add it to {SURFACE_KEYRING_ENV} and run again",
            file=sys.stderr,
        )
        return 1
    return 0
