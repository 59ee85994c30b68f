"""``turnaudit``: the command line of the turn-audit pipeline.

Each command group lives in its own module exposing ``register(subparsers)``;
a handler takes the parsed arguments and returns the exit code.

Every failure ends the command with ONE line on stderr saying what is wrong
and what to do, never a traceback (``--log-level DEBUG`` adds it):

* exit 2: usage and configuration (a wrong argument or setting, a missing tool,
  an input file that is not what it must be);
* exit 1: a runtime failure (a cluster that does not answer, an error while
  the command ran);
* exit 3: access denied: the cluster refused who the command is (a wrong
  password, a revoked credential, a certificate it does not trust) or what it
  asked (no ACL allows it).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from turnaudit.argparsing import OneLineErrorParser
from turnaudit.errors import (
    AccessDeniedError,
    BrokerError,
    MissingToolError,
    PublishError,
    StorageError,
    TurnAuditError,
)
from turnaudit.files import configured_modes
from turnaudit.kafka.access import is_denial
from turnaudit.kafka.errors import ClientException, client_exception_text
from turnaudit.logconfig import LOG_LEVELS, configure_cli_logging

USAGE_EXIT = 2
RUNTIME_EXIT = 1
DENIED_EXIT = 3
LOG_LEVEL_ENV = "TURNAUDIT_LOG_LEVEL"

# Command groups, in the order `turnaudit --help` lists them.
COMMAND_MODULES = (
    "turnaudit.commands.broker",
    "turnaudit.commands.registry",
    "turnaudit.commands.schemas",
    "turnaudit.commands.simulate",
    "turnaudit.commands.demo",
    "turnaudit.commands.topics",
    "turnaudit.commands.acls",
    "turnaudit.commands.sink",
    "turnaudit.commands.tail",
    "turnaudit.commands.htir",
    "turnaudit.commands.auditor",
    "turnaudit.commands.verify",
    "turnaudit.commands.keys",
    "turnaudit.commands.erase",
    "turnaudit.commands.surface_keys",
    "turnaudit.commands.replay",
    "turnaudit.commands.dlq",
    "turnaudit.commands.archive",
    "turnaudit.commands.evaluation",  # eval: turnaudit.evaluation.cli's tools, and rebuild
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="turnaudit",
        description="Event-streaming audit pipeline for conversational AI runtimes.",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get(LOG_LEVEL_ENV, "WARNING").strip().upper() or "WARNING",
        type=str.upper,
        choices=LOG_LEVELS,
        help="level of the JSON log lines on stderr (default WARNING, or TURNAUDIT_LOG_LEVEL); "
        "DEBUG also shows librdkafka's own lines and a failure's traceback",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=OneLineErrorParser
    )
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    level = os.environ.get(LOG_LEVEL_ENV, "").strip().upper()
    if level and level not in LOG_LEVELS:
        print(
            f"turnaudit: {LOG_LEVEL_ENV}={os.environ[LOG_LEVEL_ENV]!r}: "
            f"choose {', '.join(LOG_LEVELS[:-1])} or {LOG_LEVELS[-1]}",
            file=sys.stderr,
        )
        return USAGE_EXIT
    args = build_parser().parse_args(argv)
    configure_cli_logging(args.log_level)
    try:
        configured_modes()  # TURNAUDIT_FILE_MODE: one line on a bad value, before any file
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every failure: one line, see the module docstring
        if args.log_level == "DEBUG":
            traceback.print_exc(file=sys.stderr)
        code, text = describe_failure(exc)
        print(f"turnaudit {args.command}: {text}", file=sys.stderr)
        return code


def describe_failure(exc: Exception) -> tuple[int, str]:
    """The exit code and the one line for a command's failure."""
    if isinstance(exc, AccessDeniedError):
        return DENIED_EXIT, _one_line(str(exc))
    if isinstance(exc, BrokerError | PublishError | ClientException) and is_denial(
        client_exception_text(exc)
    ):
        return DENIED_EXIT, "access denied: " + _one_line(client_exception_text(exc))
    if isinstance(exc, TurnAuditError):
        runtime = isinstance(exc, BrokerError | PublishError | StorageError) and not isinstance(
            exc, MissingToolError
        )
        return (RUNTIME_EXIT if runtime else USAGE_EXIT), _one_line(str(exc))
    if isinstance(exc, ClientException):
        return RUNTIME_EXIT, "Kafka: " + _one_line(client_exception_text(exc))
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        hint = {
            errno.EADDRINUSE: ": the port is taken, choose another",
            errno.ENOSPC: ": free some space",
            errno.EACCES: ": check the permissions",
        }.get(exc.errno or 0, "")
        return RUNTIME_EXIT, _one_line(f"{exc.strerror or exc}{where}{hint}")
    return RUNTIME_EXIT, _one_line(
        f"unexpected {type(exc).__name__}: {exc} (--log-level DEBUG shows where)"
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
