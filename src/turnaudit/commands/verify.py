"""``turnaudit verify``: the production reconciliation of a range of the stream."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnaudit._native import stream_head, stream_partition
from turnaudit.archive.location import open_archive
from turnaudit.archive.store import ArchiveStore
from turnaudit.argparsing import (
    add_range_arguments,
    add_time_arguments,
    event_time_options,
    positive_int,
)
from turnaudit.cluster import connect
from turnaudit.commands.sink import (
    WORKERS_HELP,
    consumer_service,
    run_service,
    worker_count,
    worker_service_settings,
)
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.consumers.runtime.worker_process import WorkerPlan
from turnaudit.consumers.verify_follow import (
    DEFAULT_CHECKPOINT_INTERVAL_S as DEFAULT_FOLLOW_CHECKPOINT_S,
)
from turnaudit.consumers.verify_follow import FollowValidation, VerifyFollowSink
from turnaudit.consumers.verify_follow_heads import HeadsFeed
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.consumers.verify_follow_trust import TrustFeed, partition_judges
from turnaudit.errors import ConfigurationError
from turnaudit.identity import StreamId
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.kafka.state_topic import ensure_verify_state_topic
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import DEFAULT_CHECKPOINT_INTERVAL_S, INTERVAL_ENV, load_keyring
from turnaudit.verify.files import load_anchors
from turnaudit.verify.follow import FollowState
from turnaudit.verify.follow_records import FollowMemory
from turnaudit.verify.heads_judge import EngineView
from turnaudit.verify.id_store import DEFAULT_MEMORY_IDS, DEFAULT_MEMORY_STREAMS, IdMemory
from turnaudit.verify.run import run_verify


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="prove that every turn of a range is on the stream once, chained, logged and counted",
    )
    add_range_arguments(parser, to_help="end of the range (exclusive)")
    add_time_arguments(parser)
    parser.add_argument("--topic", help="turn-events topic to verify (default: the configured one)")
    parser.add_argument(
        "--log-file",
        type=Path,
        help="a log sink's JSON-lines file: every turn of the range must be in it",
    )
    parser.add_argument(
        "--archive",
        metavar="LOCATION",
        help="an archive (turnaudit archive run; a directory or s3://bucket/prefix): a range "
        "from the log start starts at the archive's first offset; the archive's segments "
        "feed it, the topic the rest (docs/archive.md)",
    )
    parser.add_argument(
        "--metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="a verdict-metrics /metrics URL: each pack's turns, refused, "
        "hedged and stub counters must have risen over the range by the "
        "range's counts (repeatable)",
    )
    parser.add_argument(
        "--metrics-before",
        action="append",
        default=[],
        metavar="PAGE",
        help="the /metrics page of the same service saved at the range's "
        "start (curl URL > PAGE), one per --metrics-url in order; without "
        "it the service must have read exactly this range since it started",
    )
    parser.add_argument(
        "--metrics-settle",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long the scrape at the range's end is retried while the "
        "service is still reading the range (default 10)",
    )
    parser.add_argument(
        "--heads",
        type=Path,
        metavar="REPORT",
        help="an earlier verify --json report: every stream head it saw must "
        "still be there, unchanged (catches a truncated or rewritten tail)",
    )
    parser.add_argument(
        "--keyring",
        type=Path,
        metavar="FILE",
        help="a keyring (TOML: key id -> Ed25519 public key, valid_from, "
        "revoked_at): every stream is judged against the signed checkpoints "
        "on <prefix>checkpoints; a forged or truncated stream is a finding "
        "(docs/trust.md)",
    )
    parser.add_argument(
        "--require-signed",
        action="store_true",
        help="with --keyring: a stream no valid checkpoint covers is forged, "
        "not unsigned (also require_signed = true in the keyring)",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds the range may take to read"
    )
    parser.add_argument(
        "--memory-ids",
        type=positive_int,
        default=DEFAULT_MEMORY_IDS,
        metavar="N",
        help="event ids kept in memory; older ones are spilled to sorted "
        "run files in a temporary directory and looked up there, removed at "
        f"the end (default {DEFAULT_MEMORY_IDS:,}; docs/verify.md)",
    )
    parser.add_argument(
        "--memory-streams",
        type=positive_int,
        default=DEFAULT_MEMORY_STREAMS,
        metavar="N",
        help="streams kept in memory; the least recently seen others are "
        "spilled to a temporary SQLite file and read back when their stream "
        f"goes on, removed at the end (default {DEFAULT_MEMORY_STREAMS:,}; "
        "docs/verify.md)",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="processes reading the range's partitions, each its own set "
        "(default: one per partition, at most one per core)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="run as a service that keeps proving the stream as it arrives "
        "(its own consumer group, /metrics turnaudit_verify_*, checkpoints in "
        "<prefix>verify-state; settings from TURNAUDIT_* like the sinks)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="--follow: a missing position is lost only this long after its "
        f"gap opened (default {GRACE_ENV} or {DEFAULT_GRACE_S:g})",
    )
    parser.add_argument(
        "--trust-grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="--follow --keyring: positions no valid checkpoint covers this "
        "long after their turn make the stream unsigned (forged when "
        f"required); default {TRUST_GRACE_ENV}, else twice "
        f"{INTERVAL_ENV} (default {DEFAULT_CHECKPOINT_INTERVAL_S:g} s)",
    )
    parser.add_argument(
        "--workers", type=worker_count, default=None, help="--follow: " + WORKERS_HELP
    )
    parser.set_defaults(handler=_verify)


GRACE_ENV = "TURNAUDIT_VERIFY_GRACE_S"
DEFAULT_GRACE_S = 900.0
# --follow --keyring: the workers read the keyring and the trust grace from these.
KEYRING_ENV = "TURNAUDIT_VERIFY_KEYRING"
REQUIRE_SIGNED_ENV = "TURNAUDIT_VERIFY_REQUIRE_SIGNED"
TRUST_GRACE_ENV = "TURNAUDIT_VERIFY_TRUST_GRACE_S"
# How often --follow checkpoints its proof (a restart re-reads at most this much).
CHECKPOINT_ENV = "TURNAUDIT_VERIFY_CHECKPOINT_S"


def verify_follow_worker(plan: WorkerPlan, registry: CollectorRegistry) -> ConsumerService:
    """One member of the follower's group: the proof, its checkpoint sink, the runtime."""
    settings = worker_service_settings(ServiceName.VERIFY_FOLLOW, plan)
    decode = decoder_for(settings.kafka, registry=registry)
    # The services' bounds: streams in memory (the rest spilled to disk), event ids.
    memory = FollowMemory(streams=settings.max_sessions, event_ids=settings.max_event_ids)
    grace = float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S))
    state = FollowState(grace_s=grace, memory=memory, decode=decode)
    metrics = FollowMetrics(registry)
    trust = _trust_feed(settings.kafka, metrics)
    heads = HeadsFeed(
        settings.kafka,
        follow_state_view(state, trust),
        metrics,
        packs=settings.metrics.packs,
        label_limit=settings.metrics.label_limit,
    )
    sink = VerifyFollowSink(
        settings.kafka,
        state,
        metrics,
        checkpoint_interval_s=checkpoint_interval(),
        trust=trust,
        heads=heads,
    )
    validation = FollowValidation(decode, state, metrics, sink.load, trust=trust)
    return consumer_service(settings, sink, plan, registry, validation=validation)


def follow_state_view(state: FollowState, trust: TrustFeed | None = None) -> EngineView:
    """What the heads feed asks the proof: a stream's last position and partition (the
    stream tracker's), a partition's proved offset (None until this member loaded it); a
    stream it retires leaves the proof and, once settled signed, the trust judged of it."""

    def last_position(stream: StreamId) -> int | None:
        return state.tracker.last_position(*stream)

    def head(stream: StreamId) -> tuple[int | None, int | None]:
        # One lookup for both; a stream with open gaps is placed where its gaps are.
        found = stream_head(state.tracker, *stream)
        read_from, last = (None, None) if found is None else found
        gaps = state.gaps.get(stream)
        return (read_from if gaps is None else gaps.partition), last

    def partition_of(stream: StreamId) -> int | None:
        return head(stream)[0]

    def proved_offset(partition: int) -> int | None:
        proof = state.partitions.get(partition)
        return None if proof is None else proof.next_offset

    def retire(stream: StreamId) -> bool:
        # A stream with an open gap stays: its missing turns are still owed.
        if stream in state.gaps:
            return False
        if trust is None:
            return state.retire(stream)
        partition = stream_partition(state.tracker, *stream)  # before it leaves the proof
        gone = state.retire(stream)
        if gone and partition is not None:
            trust.retire(partition, stream)
        return gone

    return EngineView(last_position, partition_of, proved_offset, retire, head)


def _trust_feed(kafka: KafkaSettings, metrics: FollowMetrics) -> TrustFeed | None:
    """The trust judged against signed checkpoints, when the follower has a keyring."""
    path = os.environ.get(KEYRING_ENV)
    if not path:
        return None
    keyring = load_keyring(Path(path))
    if os.environ.get(REQUIRE_SIGNED_ENV) == "1":
        keyring = replace(keyring, require_signed=True)
    return TrustFeed(kafka, partition_judges(kafka, keyring, grace_s=trust_grace()), metrics)


def checkpoint_interval() -> float:
    """How often the follower checkpoints its proof: its setting, else the default."""
    given = os.environ.get(CHECKPOINT_ENV) or ""
    try:
        interval = float(given) if given else DEFAULT_FOLLOW_CHECKPOINT_S
    except ValueError:
        raise ConfigurationError(
            f"{CHECKPOINT_ENV}={given!r}: expected a number of seconds"
        ) from None
    if not 0 <= interval < float("inf"):
        raise ConfigurationError(
            f"{CHECKPOINT_ENV}={given!r}: the checkpoint interval must be 0 or more seconds"
        )
    return interval


def trust_grace() -> float:
    """The trust grace: its setting, else twice the publisher's checkpoint interval."""
    given = os.environ.get(TRUST_GRACE_ENV) or ""
    interval = os.environ.get(INTERVAL_ENV) or ""
    try:
        grace = float(given) if given else 2 * float(interval or DEFAULT_CHECKPOINT_INTERVAL_S)
    except ValueError:
        raise ConfigurationError(
            f"{TRUST_GRACE_ENV}={given!r} / {INTERVAL_ENV}={interval!r}: "
            "expected a number of seconds"
        ) from None
    if not 0 <= grace < float("inf"):
        raise ConfigurationError(f"the trust grace must be 0 or more seconds, not {grace!r}")
    return grace


def _follow(args: argparse.Namespace) -> int:
    if args.since or args.until or args.from_offsets or args.to_offsets or args.json:
        raise ConfigurationError("--follow proves the stream as it arrives: no range, no --json")
    if args.require_signed and args.keyring is None:
        raise ConfigurationError("--require-signed needs --keyring FILE (the public keys)")
    if args.trust_grace is not None and args.keyring is None:
        raise ConfigurationError("--trust-grace needs --keyring FILE (the public keys)")
    if args.grace is not None:
        if args.grace < 0:
            raise ConfigurationError("--grace must be 0 or more seconds")
        os.environ[GRACE_ENV] = str(args.grace)  # the workers inherit it
    if args.keyring is not None:
        load_keyring(args.keyring)  # a bad keyring: one line now, not in the worker
        os.environ[KEYRING_ENV] = str(args.keyring.resolve())
        os.environ[REQUIRE_SIGNED_ENV] = "1" if args.require_signed else ""
        if args.trust_grace is not None:
            os.environ[TRUST_GRACE_ENV] = str(args.trust_grace)
        trust_grace()
    checkpoint_interval()  # a bad interval: one line now, not in the worker
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    ensure_verify_state_topic(settings)
    return run_service(ServiceName.VERIFY_FOLLOW, verify_follow_worker, args)


def _archive(location: str | None) -> ArchiveStore | None:
    if location is None:
        return None
    return open_archive(location, label="--archive")


def _verify(args: argparse.Namespace) -> int:
    if args.follow:
        given = [
            flag
            for flag, set_ in (
                ("--memory-ids", args.memory_ids != DEFAULT_MEMORY_IDS),
                ("--memory-streams", args.memory_streams != DEFAULT_MEMORY_STREAMS),
                ("--jobs", args.jobs is not None),
                ("--archive", args.archive is not None),
            )
            if set_
        ]
        if given:
            raise ConfigurationError(
                f"{' and '.join(given)} "
                f"{'is' if len(given) == 1 else 'are'} for a range, not "
                "--follow (--workers N)"
            )
        return _follow(args)
    memory = IdMemory(event_ids=args.memory_ids, streams=args.memory_streams)
    archive = _archive(args.archive)  # a wrong folder: one line before the cluster is asked
    if args.trust_grace is not None:
        raise ConfigurationError("--trust-grace is for --follow")
    if args.require_signed and args.keyring is None:
        raise ConfigurationError("--require-signed needs --keyring FILE (the public keys)")
    keyring = None
    if args.keyring is not None:
        keyring = load_keyring(args.keyring)
        if args.require_signed:
            keyring = replace(keyring, require_signed=True)
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    decode = decoder_for(settings)
    spec = RangeSpec(args.since, args.until, args.from_offsets, args.to_offsets)
    if len(args.metrics_before) > len(args.metrics_url):
        raise ConfigurationError("--metrics-before: one page per --metrics-url, in order")
    before = [_read_page(Path(p)) for p in args.metrics_before]
    event_time, slack = event_time_options(args)
    report = run_verify(
        settings,
        decode,
        spec,
        topic=args.topic,
        log_file=args.log_file,
        metrics_urls=args.metrics_url,
        metrics_before=before,
        metrics_settle_s=args.metrics_settle,
        timeout=args.timeout,
        event_time=event_time,
        slack=slack,
        anchors=load_anchors(args.heads) if args.heads else None,
        keyring=keyring,
        keyring_source=str(args.keyring or ""),
        memory=memory,
        jobs=args.jobs,
        archive=archive,
    )
    if args.json:
        report.write_json(sys.stdout)  # the heads streamed: a million streams' list is large
        print()
    else:
        print(report.human())
    return 0 if report.ok else 1


def _read_page(path: Path) -> str:
    try:
        return path.read_text("utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--metrics-before: cannot read {path}: {exc}") from exc
