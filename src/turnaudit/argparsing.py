"""The one argparse parser class of the project's command lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from turnaudit.errors import TurnAuditError

# Adds a tool's arguments (and its ``handler``) to a parser.
Configure = Callable[[argparse.ArgumentParser], None]


class OneLineErrorParser(argparse.ArgumentParser):
    """A wrong argument gets one line saying what is wrong, not the usage text."""

    _argv: list[str] | None = None

    def parse_args(  # type: ignore[override]  # typeshed's overloads by namespace type; one form here
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        self._argv = list(sys.argv[1:] if args is None else args)
        parsed: argparse.Namespace = super().parse_args(args, namespace)
        return parsed

    def error(self, message: str) -> NoReturn:
        # argparse names a missing command before an unknown option; the
        # unknown option is what the user got wrong.
        if self._argv is not None and "arguments are required" in message:
            unknown = [
                a
                for a in self._argv
                if a.startswith("-") and a.split("=")[0] not in self._option_string_actions
            ]
            if unknown and not any(not a.startswith("-") for a in self._argv):
                message = f"unrecognized arguments: {' '.join(unknown)}"
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def iso_time(text: str) -> datetime:
    """An argparse ``type``: an ISO 8601 time; no zone means UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def partition_offsets(text: str) -> dict[int, int]:
    """An argparse ``type``: ``partition:offset`` pairs, e.g. ``0:100,1:250``."""
    try:
        pairs = [item.split(":") for item in text.split(",") if item.strip()]
        found = {int(p): int(o) for p, o in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of partition:offset like 0:100,1:250"
        ) from None
    if not found or any(p < 0 or o < 0 for p, o in found.items()):
        raise argparse.ArgumentTypeError(f"{text!r}: partitions and offsets are >= 0")
    return found


def add_range_arguments(parser: argparse.ArgumentParser, *, to_help: str) -> None:
    """A range of a topic by message time or by offsets (``verify``, ``replay``)."""
    parser.add_argument(
        "--from",
        dest="since",
        type=iso_time,
        metavar="ISO-TIME",
        help="first message time (Kafka timestamp; no zone = UTC)",
    )
    parser.add_argument("--to", dest="until", type=iso_time, metavar="ISO-TIME", help=to_help)
    parser.add_argument(
        "--from-offsets",
        type=partition_offsets,
        metavar="P:O,…",
        help="first offset per partition, e.g. 0:1200,1:980",
    )
    parser.add_argument(
        "--to-offsets",
        type=partition_offsets,
        metavar="P:O,…",
        help="end offset (exclusive) per partition",
    )


def add_time_arguments(parser: argparse.ArgumentParser) -> None:
    """``--time broker|event`` and ``--slack`` (``replay``, ``verify``, ``eval rebuild``,
    ``tail``): what ``--from``/``--to`` select; the rule is
    ``turnaudit.kafka.offsets.event_time_range``."""
    parser.add_argument(
        "--time",
        choices=("broker", "event"),
        default="broker",
        help="what --from/--to select: broker (default: the records' Kafka timestamps, "
        "resolved with offsets_for_times) or event (the turns' occurred_at, filtered after "
        "reading the broker range widened by --slack)",
    )
    parser.add_argument(
        "--slack",
        type=non_negative_seconds,
        metavar="SECONDS",
        help="with --time event: read records stored from SECONDS before --from to SECONDS "
        "after --to (default: the whole retained stream)",
    )


def non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds are 0 or more")
    return value


def positive_seconds(text: str) -> float:
    value = non_negative_seconds(text)
    if value < 0.001:
        raise argparse.ArgumentTypeError(f"{text!r}: at least one millisecond")
    return value


def event_time_options(args: argparse.Namespace) -> tuple[bool, timedelta | None]:
    """``(event_time, slack)`` from ``add_time_arguments``' options."""
    return args.time == "event", None if args.slack is None else timedelta(seconds=args.slack)


def run_standalone(prog: str, configure: Configure, argv: Sequence[str] | None = None) -> int:
    """The ``python -m`` form of one tool: same parser, same handlers, same exit codes."""
    parser = OneLineErrorParser(prog=prog)
    configure(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except TurnAuditError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
