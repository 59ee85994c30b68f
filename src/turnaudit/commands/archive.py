"""``turnaudit archive run|check``: the archiver service, and the check of an archive.

``run`` archives a topic (``--topic``: the turn events by default, or the checkpoints or
stream heads) into ``TURNAUDIT_ARCHIVE_DIR``, digests signed with
``TURNAUDIT_ARCHIVE_KEY_FILE`` (``TURNAUDIT_ARCHIVE_KEY_ID``); settings from the
environment like every service; SIGTERM or SIGINT writes the open segments and a last
digest, then exits 0.

``export LOCATION --jsonl OUT`` writes the archive's turns as JSON Lines
(``turnaudit.replay.archive_export``), ``--parquet OUT`` as Parquet of fixed columns
(``turnaudit.archive.export_parquet``; pyarrow, the ``parquet`` extra), with the archive
alone.

``check LOCATION --keyring FILE`` verifies every digest, every segment's hash and the
chains (``turnaudit.archive.check``): one line per finding on stdout and exit 1, or a
line per partition and exit 0. docs/archive.md says what each finding means.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnaudit.archive.check import check_archive
from turnaudit.archive.location import open_archive
from turnaudit.archive.settings import ArchiveSettings
from turnaudit.commands.sink import (
    add_workers_argument,
    run_service,
    worker_service_settings,
)
from turnaudit.consumers.archive import archive_service
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings
from turnaudit.consumers.runtime.worker_process import WorkerPlan
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.decoders import decoder_for
from turnaudit.redaction import surface_redaction
from turnaudit.replay.archive_export import export_jsonl
from turnaudit.settings import ENV_PREFIX, KafkaSettings
from turnaudit.signing_keys import load_keyring
from turnaudit.topic_names import CHECKPOINTS, STREAM_HEADS, TURN_EVENTS

ARCHIVED_TOPICS = (TURN_EVENTS, CHECKPOINTS, STREAM_HEADS)
GROUP_ENV = ENV_PREFIX + "GROUP_ID"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "archive", help="keep a topic's records past retention: sealed segments, signed digests"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser(
        "run",
        help="the archiver service (TURNAUDIT_ARCHIVE_DIR: a directory or s3://bucket/prefix, "
        "TURNAUDIT_ARCHIVE_KEY_FILE, TURNAUDIT_ARCHIVE_KEY_ID; docs/archive.md)",
    )
    run.add_argument(
        "--topic",
        choices=ARCHIVED_TOPICS,
        default=TURN_EVENTS,
        help="the topic to archive, after the prefix (default turn-events); each in a "
        "group of its own",
    )
    add_workers_argument(run)
    run.set_defaults(handler=_run)
    check = actions.add_parser(
        "check", help="verify every digest, segment and chain of an archive; exit 1 on a finding"
    )
    check.add_argument(
        "location", metavar="LOCATION", help="the archive: a directory or s3://bucket/prefix"
    )
    check.add_argument(
        "--keyring", type=Path, required=True, metavar="FILE", help="the keyring (TOML)"
    )
    check.set_defaults(handler=_check)
    export = actions.add_parser(
        "export",
        help="an archive's turns as JSON Lines (replay's jsonl lines) or Parquet (fixed "
        "columns, docs/archive.md), for DuckDB",
    )
    export.add_argument(
        "location", metavar="LOCATION", help="the archive: a directory or s3://bucket/prefix"
    )
    into = export.add_mutually_exclusive_group(required=True)
    into.add_argument(
        "--jsonl", type=Path, metavar="OUT", help="JSON Lines: the file to write (replaced)"
    )
    into.add_argument(
        "--parquet",
        type=Path,
        metavar="OUT",
        help="Parquet: the file to write (replaced when complete; needs pyarrow)",
    )
    export.set_defaults(handler=_export)


def archived_topic(settings: ServiceSettings, topic: str) -> tuple[str, ServiceSettings]:
    """The full topic name, and the settings with its group: ``<prefix>archive`` for the
    turn events, ``<prefix>archive-<topic>`` for the others (unless TURNAUDIT_GROUP_ID)."""
    names = settings.kafka.topics
    full = {
        TURN_EVENTS: names.turn_events,
        CHECKPOINTS: names.checkpoints,
        STREAM_HEADS: names.stream_heads,
    }[topic]
    if topic != TURN_EVENTS and not _group_set():
        settings = replace(settings, group_id=f"{settings.group_id}-{topic}")
    return full, settings


def _group_set() -> bool:
    return bool(os.environ.get(GROUP_ENV, "").strip())


def _run(args: argparse.Namespace) -> int:
    archive = ArchiveSettings.from_env()  # a wrong setting: one line before anything starts

    def archiver(plan: WorkerPlan, registry: CollectorRegistry) -> ConsumerService:
        settings = worker_service_settings(ServiceName.ARCHIVE, plan)
        topic, settings = archived_topic(settings, args.topic)
        return archive_service(
            settings,
            ArchiveSettings.from_env() if plan.supervised else archive,
            registry=registry,
            topic=topic,
            serve_http=not plan.supervised,
        )

    return run_service(ServiceName.ARCHIVE, archiver, args)


def _check(args: argparse.Namespace) -> int:
    archive = open_archive(args.location)
    report = check_archive(archive, load_keyring(args.keyring))
    for finding in report.findings:
        print(finding.line())
    for s in report.partitions:
        held = "nothing" if s.first is None else f"offsets {s.first}-{s.last}"
        print(
            f"{s.topic}/{s.partition}: {s.records} records in {s.segments} segments "
            f"({held}), {s.digests} digests"
        )
    if report.findings:
        print(f"{len(report.findings)} findings")
        return 1
    return 0


def _export(args: argparse.Namespace) -> int:
    archive = open_archive(args.location)
    settings = KafkaSettings.from_env()
    surfaces = surface_redaction()  # a wrong policy: one line before anything is read
    # The shipped versions (and the registry, when one is set): no broker is asked.
    decode = decoder_for(settings, schemas_topic=False)
    topic = settings.topics.turn_events
    if args.jsonl is not None:
        print(export_jsonl(archive, topic, decode, args.jsonl, surfaces).human())
        return 0
    try:
        from turnaudit.archive.export_parquet import export_parquet  # noqa: PLC0415 - pyarrow is an extra
    except ImportError as exc:  # pyarrow is an extra: only this export needs it
        raise ConfigurationError(
            f"--parquet needs pyarrow ({exc}): pip install 'turnaudit[parquet]'"
        ) from exc
    print(export_parquet(archive, topic, decode, args.parquet, surfaces).human())
    return 0
