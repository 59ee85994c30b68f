"""``turnaudit``: the command line of the turn-audit pipeline.

Each command group lives in its own module exposing ``register(subparsers)``;
a handler takes the parsed arguments and returns the exit code. Errors of this
package end the command with one line saying what is wrong, and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from turnaudit.argparsing import OneLineErrorParser
from turnaudit.errors import TurnAuditError
from turnaudit.logconfig import configure_cli_logging

# Command groups, in the order `turnaudit --help` lists them.
COMMAND_MODULES = (
    "turnaudit.commands.broker",
    "turnaudit.commands.schemas",
    "turnaudit.commands.simulate",
    "turnaudit.commands.demo",
    "turnaudit.commands.topics",
    "turnaudit.commands.sink",
    "turnaudit.commands.tail",
    "turnaudit.commands.htir",
    "turnaudit.commands.auditor",
    "turnaudit.commands.verify",
    "turnaudit.evaluation.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="turnaudit",
        description="Event-streaming audit pipeline for conversational AI runtimes.",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("TURNAUDIT_LOG_LEVEL", "WARNING"),
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="level of the JSON log lines on stderr (default WARNING, or TURNAUDIT_LOG_LEVEL)",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=OneLineErrorParser
    )
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_cli_logging(args.log_level)
    try:
        return int(args.handler(args))
    except TurnAuditError as exc:
        print(f"turnaudit {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
