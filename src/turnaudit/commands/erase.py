"""``turnaudit erase --session ID`` (or ``--from T --to T``): destroy a session's data keys
(or every data key sealed within a time range), so that no reader can open those sealed
surfaces again, and record the erasure on ``<prefix>erasures``.

The turns stay, sealed: ``verify`` still proves them complete and signed (the chain and
the signatures cover the sealed form). No key-encryption key is needed. What erasure
guarantees and what it cannot reach: docs/privacy.md.
"""

from __future__ import annotations

import argparse
import getpass
import os
from datetime import datetime

from turnaudit.argparsing import iso_time
from turnaudit.cluster import connect, require_access
from turnaudit.errors import ConfigurationError
from turnaudit.sealing.key_topic import ErasureRecord, erase_range, erase_session
from turnaudit.settings import KafkaSettings

ERASED_BY_ENV = "TURNAUDIT_OPERATOR"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "erase",
        help="destroy a session's (or a time range's) surface data keys and record the erasure",
    )
    parser.add_argument("--session", metavar="ID", help="the session to erase")
    parser.add_argument(
        "--from",
        dest="since",
        type=iso_time,
        metavar="ISO-TIME",
        help="erase the data keys sealed from this time on (no zone = UTC; with --to): "
        "a day key whose UTC day overlaps the range, a session key made in it",
    )
    parser.add_argument(
        "--to",
        dest="until",
        type=iso_time,
        metavar="ISO-TIME",
        help="... up to this time, excluded (no zone = UTC; with --from)",
    )
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


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def erased_range(args: argparse.Namespace) -> tuple[int, int] | None:
    """The range ``--from``/``--to`` give in ms (None: ``--session`` was given); a wrong
    combination is ``ConfigurationError``, one line."""
    ranged = args.since is not None or args.until is not None
    if args.session is not None and ranged:
        raise ConfigurationError("give --session ID or --from/--to, not both")
    if args.session is not None:
        if not args.session:
            raise ConfigurationError("--session: give the session id to erase")
        return None
    if not ranged:
        raise ConfigurationError("say what to erase: --session ID, or --from T --to T")
    if args.since is None or args.until is None:
        raise ConfigurationError("a range to erase needs both --from and --to")
    if args.until <= args.since:
        raise ConfigurationError("--to must be later than --from")
    return _ms(args.since), _ms(args.until)


def _erase(args: argparse.Namespace) -> int:
    time_range = erased_range(args)
    who = _erased_by(args.by)
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    topics = settings.topics
    require_access(
        settings,
        reads=[topics.surface_keys],
        writes=[topics.surface_keys, topics.erasures],
    )
    if time_range is None:
        record = erase_session(settings, args.session, erased_by=who, reason=args.reason)
        keys = len(record.data_key_ids)
        print(
            f"session {record.session_id!r}: {keys} data key(s) destroyed; erasure recorded "
            f"on {topics.erasures} by {record.erased_by}"
            + ("" if keys else " (no data key found: nothing of it was sealed, or already erased)")
        )
        return 0
    records = erase_range(settings, *time_range, erased_by=who, reason=args.reason)
    print(_range_summary(records, args.since, args.until, topics.erasures))
    return 0


def _range_summary(
    records: list[ErasureRecord], since: datetime, until: datetime, erasures: str
) -> str:
    keys = sum(len(r.data_key_ids) for r in records)
    sessions = sum(1 for r in records if r.data_key_ids)
    return (
        f"{since.isoformat()} to {until.isoformat()}: {keys} data key(s) of {sessions} "
        f"session(s) destroyed; erasure recorded on {erasures} by {records[0].erased_by}"
        + ("" if keys else " (no data key sealed in the range, or already erased)")
    )
