"""``turnaudit erase --session ID``: destroy a session's data keys, so that no reader can
open its sealed surfaces again, and record the erasure on ``<prefix>erasures``.

The turns stay, sealed: ``verify`` still proves them complete and signed (the chain and
the signatures cover the sealed form). No key-encryption key is needed. What erasure
guarantees and what it cannot reach: docs/privacy.md.
"""

from __future__ import annotations

import argparse
import getpass
import os

from turnaudit.cluster import connect, require_access
from turnaudit.errors import ConfigurationError
from turnaudit.sealing.key_topic import erase_session
from turnaudit.settings import KafkaSettings

ERASED_BY_ENV = "TURNAUDIT_OPERATOR"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "erase", help="destroy a session's surface data keys and record the erasure"
    )
    parser.add_argument("--session", required=True, metavar="ID", help="the session to erase")
    parser.add_argument(
        "--by",
        metavar="WHO",
        help=f"who erases, for the record (default: {ERASED_BY_ENV}, else the login name)",
    )
    parser.add_argument("--reason", default="", help="why, for the record (e.g. a ticket)")
    parser.set_defaults(handler=_erase)


def _erased_by(given: str | None) -> str:
    who = (given or os.environ.get(ERASED_BY_ENV, "")).strip()
    if not who:
        try:
            who = getpass.getuser()
        except (KeyError, OSError):
            who = ""
    if not who:
        raise ConfigurationError(f"say who erases: --by WHO or {ERASED_BY_ENV}")
    return who


def _erase(args: argparse.Namespace) -> int:
    if not args.session:
        raise ConfigurationError("--session: give the session id to erase")
    who = _erased_by(args.by)
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    topics = settings.topics
    require_access(
        settings,
        reads=[topics.surface_keys],
        writes=[topics.surface_keys, topics.erasures],
    )
    record = erase_session(settings, args.session, erased_by=who, reason=args.reason)
    keys = len(record.data_key_ids)
    print(
        f"session {record.session_id!r}: {keys} data key(s) destroyed; erasure recorded "
        f"on {topics.erasures} by {record.erased_by}"
        + ("" if keys else " (no data key found: nothing of it was sealed, or already erased)")
    )
    return 0
