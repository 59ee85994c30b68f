"""``turnaudit verify``: the production reconciliation of a range of the stream."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from turnaudit.argparsing import add_range_arguments
from turnaudit.cluster import connect
from turnaudit.commands.demo_consumers import ReconciliationRow
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.serialization.decoders import decoder_for
from turnaudit.settings import KafkaSettings
from turnaudit.verify.files import load_anchors
from turnaudit.verify.run import run_verify


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="prove that every turn of a range is on the stream once, chained, logged and counted",
    )
    add_range_arguments(parser, to_help="end of the range (exclusive)")
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


def _verify(args: argparse.Namespace) -> int:
    settings, _ = connect(KafkaSettings.from_env(), start_local=False)
    decode = decoder_for(settings)
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
        settings, decoder_for(settings), RangeSpec(from_offsets=start_offsets)
    )
    return [
        ReconciliationRow("verify: turns on the stream", report.verifier.counts.turns,
                          expected_turns),
        ReconciliationRow("verify: turns lost", report.verifier.lost_positions(), 0),
        ReconciliationRow("verify: unexplained findings", len(report.unexplained()), 0),
    ]
