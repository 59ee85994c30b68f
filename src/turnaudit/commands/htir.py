"""``turnaudit htir feed``: the HTIR feeder service."""

from __future__ import annotations

import argparse
from pathlib import Path

from turnaudit.commands.sink import service_registry, service_settings
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.log_sink import service_logging
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.settings import ServiceName
from turnaudit.errors import ConfigurationError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("htir", help="HTIR traces from the turn-events stream")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    feed = actions.add_parser(
        "feed", help="assemble per-task traces and publish them to <prefix>htir-traces"
    )
    feed.add_argument(
        "--idle-timeout", type=float, default=300.0,
        help="close a trace after this many seconds without a turn (default 300)",
    )
    feed.add_argument(
        "--manifest", type=Path,
        help="also append each trace as an eval-manifest JSONL line (for review packs)",
    )
    feed.set_defaults(handler=_feed)


def _feed(args: argparse.Namespace) -> int:
    if args.idle_timeout <= 0:
        raise ConfigurationError("--idle-timeout must be positive")
    settings = service_settings(ServiceName.HTIR_FEEDER)
    registry = service_registry()
    sink = HtirFeederSink(
        settings.kafka, registry=registry, idle_timeout=args.idle_timeout, manifest=args.manifest
    )
    with service_logging(args.log_level):
        service = ConsumerService(settings, sink, registry=registry)
        service.install_signal_handlers()
        service.run()
    return 0
