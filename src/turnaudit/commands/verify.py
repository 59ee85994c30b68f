"""``turnaudit verify``: the production reconciliation of a range of the stream."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from turnaudit.cluster import connect
from turnaudit.commands.demo_consumers import ReconciliationRow
from turnaudit.serialization.schema_topic import SchemaTopicResolver
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer, registry_client
from turnaudit.settings import KafkaSettings
from turnaudit.verify import RangeSpec, load_anchors, run_verify


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="prove that every turn of a range is on the stream once, chained, logged and counted",
    )
    parser.add_argument("--from", dest="since", type=_iso_time, metavar="ISO-TIME",
                        help="first message time (Kafka timestamp; no zone = UTC)")
    parser.add_argument("--to", dest="until", type=_iso_time, metavar="ISO-TIME",
                        help="end of the range (exclusive)")
    parser.add_argument("--from-offsets", type=_offsets, metavar="P:O,…",
                        help="first offset per partition, e.g. 0:1200,1:980")
    parser.add_argument("--to-offsets", type=_offsets, metavar="P:O,…",
                        help="end offset (exclusive) per partition")
    parser.add_argument("--topic", help="turn-events topic to verify (default: the configured one)")
    parser.add_argument("--log-file", type=Path,
                        help="a log sink's JSON-lines file: every turn of the range must be in it")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                        help="a verdict-metrics /metrics URL whose counters must equal the "
                        "range's counts (repeatable)")
    parser.add_argument("--heads", type=Path, metavar="REPORT",
                        help="an earlier verify --json report: every stream head it saw must "
                        "still be there, unchanged (catches a truncated or rewritten tail)")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds the range may take to read")
    parser.set_defaults(handler=_verify)


def _iso_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _offsets(text: str) -> dict[int, int]:
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


def _verify(args: argparse.Namespace) -> int:
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    decode = TurnEventDeserializer(
        shipped_catalog(),
        registry=registry_client(settings.schema_registry_url)
        if settings.schema_registry_url else None,
        resolver=SchemaTopicResolver(settings),
    )
    spec = RangeSpec(args.since, args.until, args.from_offsets, args.to_offsets)
    report = run_verify(
        settings, decode, spec, topic=args.topic, log_file=args.log_file,
        metrics_urls=args.metrics_url, timeout=args.timeout,
        anchors=load_anchors(args.heads) if args.heads else None,
    )
    if args.json:
        json.dump(report.as_json(), sys.stdout, indent=2, sort_keys=False)
        print()
    else:
        print(report.human())
    return 0 if report.ok else 1


def demo_rows(
    settings: KafkaSettings, start_offsets: dict[int, int], expected_turns: int
) -> list[ReconciliationRow]:
    """``verify``'s verdict on what the demo published (from ``start_offsets`` to the end)."""
    report = run_verify(
        settings, TurnEventDeserializer(shipped_catalog()), RangeSpec(from_offsets=start_offsets)
    )
    summary = report.as_json()
    return [
        ReconciliationRow("verify: turns on the stream", summary["counts"]["turns"],
                          expected_turns),
        ReconciliationRow("verify: turns lost", summary["lost"], 0),
        ReconciliationRow("verify: unexplained findings", len(summary["unexplained"]), 0),
    ]
