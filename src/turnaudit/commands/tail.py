"""``turnaudit tail --show-verdicts``: one line per turn, live (ADR-0039 open question 2).

Its surfaces follow the one policy of every writer (``TURNAUDIT_SURFACES``, default
``drop``: none shown) and sealed turns open with the one keyring setting of every reader
(``TURNAUDIT_SURFACE_KEYRING``); without it they show ``[sealed: no_keyring]``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from turnaudit.argparsing import (
    event_time_options,
    iso_time,
    non_negative_seconds,
    positive_int,
)
from turnaudit.cluster import connect, require_access
from turnaudit.consumers.tail import TailFilter, tail_turns
from turnaudit.errors import ConfigurationError
from turnaudit.redaction import surface_redaction
from turnaudit.sealing.keys import provider_from_env
from turnaudit.sealing.opening import turn_opener
from turnaudit.settings import KafkaSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tail", help="print the turns on the topic as they arrive, one line each"
    )
    parser.add_argument(
        "--show-verdicts",
        action="store_true",
        help="add the verdict bundle and the action-risk split to each line",
    )
    parser.add_argument(
        "--from",
        dest="since",
        type=iso_time,
        metavar="ISO-TIME",
        help="start at this time (e.g. 2026-11-01T12:00:00Z; no zone = UTC) instead of now",
    )
    parser.add_argument(
        "--time",
        choices=("broker", "event"),
        default="broker",
        help="what --from selects: broker (default: the records' Kafka timestamps) or event "
        "(the turns' occurred_at, from the records stored --slack before --from on)",
    )
    parser.add_argument(
        "--slack",
        type=non_negative_seconds,
        metavar="SECONDS",
        help="with --time event: read records stored from SECONDS before --from "
        "(default: the whole retained stream)",
    )
    parser.add_argument("--pack", help="only turns of this pack id")
    parser.add_argument("--session", help="only turns of this session id")
    parser.add_argument("--limit", type=positive_int, help="stop after this many lines")
    parser.set_defaults(handler=_tail)


def _tail(args: argparse.Namespace) -> int:
    event_time, slack = event_time_options(args)
    if event_time and args.since is None:
        raise ConfigurationError("--time event selects turns from --from: give --from")
    surfaces = surface_redaction()  # a bad policy or keyring: one line, before the cluster
    provider = provider_from_env()
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    topics = settings.topics
    opens = provider is not None and surfaces.writes  # reads the key topic on a sealed turn
    require_access(
        settings,
        reads=[topics.turn_events, topics.schemas] + ([topics.surface_keys] if opens else []),
    )
    stop = threading.Event()

    def handle(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    tail_turns(
        settings,
        sys.stdout,
        since=args.since,
        event_time=event_time,
        slack=slack,
        filters=TailFilter(pack=args.pack, session=args.session),
        show_verdicts=args.show_verdicts,
        surfaces=surfaces,
        opener=turn_opener(settings, surfaces, provider),
        limit=args.limit,
        stop=stop,
    )
    return 0
