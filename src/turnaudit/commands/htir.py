"""``turnaudit htir feed``: the HTIR feeder service."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnaudit.commands.sink import (
    add_workers_argument,
    consumer_service,
    run_service,
    worker_service_settings,
)
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.consumers.runtime.worker_process import WorkerPlan, per_worker_path
from turnaudit.errors import ConfigurationError
from turnaudit.sealing.opening import turn_opener


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("htir", help="HTIR traces from the turn-events stream")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    feed = actions.add_parser(
        "feed", help="assemble per-task traces and publish them to <prefix>htir-traces"
    )
    feed.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        help="close a trace after this many seconds without a turn (default 300)",
    )
    feed.add_argument(
        "--manifest",
        type=Path,
        help="also append each trace as an eval-manifest JSONL line (for review packs); "
        "with --workers N, worker i writes <name>.worker-<i><suffix>",
    )
    add_workers_argument(feed)
    feed.set_defaults(handler=_feed)


@dataclass(frozen=True)
class FeederWorker:
    """Builds a feeder worker's service (picklable: it crosses ``spawn``).

    A task's turns share their session, so its whole trace is read by one
    member of the group; open traces follow their partition on a rebalance
    (``HtirFeederSink.partitions_revoked``).
    """

    idle_timeout: float
    manifest: Path | None

    def __call__(self, plan: WorkerPlan, registry: CollectorRegistry) -> ConsumerService:
        settings = worker_service_settings(ServiceName.HTIR_FEEDER, plan)
        manifest = self.manifest
        if manifest is not None and plan.supervised:
            manifest = per_worker_path(manifest, plan.index)  # one writer per file
        sink = HtirFeederSink(
            settings.kafka,
            registry=registry,
            idle_timeout=self.idle_timeout,
            manifest=manifest,
            redaction=settings.surfaces,
            opener=turn_opener(settings.kafka, settings.surfaces),  # a bad keyring: one line
        )
        return consumer_service(settings, sink, plan, registry)


def _feed(args: argparse.Namespace) -> int:
    if args.idle_timeout <= 0:
        raise ConfigurationError("--idle-timeout must be positive")
    feeder = FeederWorker(args.idle_timeout, args.manifest)
    return run_service(ServiceName.HTIR_FEEDER, feeder, args)
