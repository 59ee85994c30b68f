"""``turnaudit eval``: the EVR-6 tools (``turnaudit.evaluation.cli``) and ``eval rebuild``.

``eval rebuild`` re-derives traces and evidence from a range of the turn
stream: a replay (manual assignment, no group, nothing committed) into the
HTIR feeder's assembly, then the auditor worker's evidence logic with the
given labels and pinned auditor (``turnaudit.consumers.replay.evidence``). For
the same range, labels and auditor it writes the same evidence file as the
live worker, so a second team can reproduce a gate decision from the stream.
With ``--archive DIR`` the range starts in the archive (``turnaudit archive run``) and
ends on the topic, read as ``replay --archive`` reads it (``turnaudit.replay.archived``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from turnaudit.archive.location import open_archive
from turnaudit.argparsing import add_range_arguments, add_time_arguments, event_time_options
from turnaudit.cluster import connect
from turnaudit.consumers.replay.evidence import file_digest, rebuild_evidence
from turnaudit.evaluation import cli as evaluation_cli
from turnaudit.evaluation.auditor_options import add_auditor_arguments, build_auditor
from turnaudit.evaluation.errors import AuditorIdentityError, NotReproducedError
from turnaudit.evaluation.files import write_json
from turnaudit.evaluation.gate import evaluate, print_report
from turnaudit.evaluation.labels import load_task_labels
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.redaction import surface_redaction
from turnaudit.replay import ReplayRequest, parse_partitions
from turnaudit.sealing.opening import turn_opener
from turnaudit.settings import KafkaSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tools = evaluation_cli.register(subparsers)
    rebuild = tools.add_parser(
        "rebuild",
        help="re-derive traces and evidence from a range of the turn stream",
        description="Replays the range into the HTIR feeder's assembly and the auditor "
        "worker's evidence logic, in this process, without joining any group or committing. "
        "Verdicts are re-derived by the pinned auditor and must equal the ones the live "
        "worker recorded on <prefix>auditor-observations, whose latencies are kept: the "
        "evidence is then byte-identical to the live worker's for the same range and labels.",
    )
    add_range_arguments(
        rebuild, to_help="end of the range (exclusive; default: the high-water marks now)"
    )
    add_time_arguments(rebuild)
    rebuild.add_argument("--partitions", metavar="P,…", help="only these partitions, e.g. 0,2")
    rebuild.add_argument("--topic", help="turn-events topic (default: the configured one)")
    rebuild.add_argument(
        "--archive",
        metavar="LOCATION",
        help="an archive (turnaudit archive run; a directory or s3://bucket/prefix): a range "
        "from the log start starts at the archive's first offset, a --from/--to by broker "
        "time is looked up in the archive and the topic; the archive's segments "
        "feed it, the topic the rest, as replay --archive reads it (docs/archive.md)",
    )
    rebuild.add_argument(
        "--labels",
        type=Path,
        required=True,
        help="a finalized label pack, or the simulator's ground truth",
    )
    add_auditor_arguments(rebuild, default="rules")
    rebuild.add_argument("--output", type=Path, required=True, help="evidence file to write")
    rebuild.add_argument("--report", type=Path, help="also run the gate and write its report")
    rebuild.add_argument(
        "--traces", type=Path, help="keep the replayed traces here (htir JSONL; default: not kept)"
    )
    rebuild.add_argument(
        "--measure-latency",
        action="store_true",
        help="keep freshly measured latencies instead of the recorded ones "
        "(the file then differs from the live worker's by its latencies)",
    )
    rebuild.add_argument(
        "--read-timeout",
        type=float,
        default=300.0,
        help="seconds a partition's range may take to read",
    )
    rebuild.set_defaults(handler=_rebuild)


def _rebuild(args: argparse.Namespace) -> int:
    if args.archive is not None:
        open_archive(args.archive, label="--archive")  # a wrong one: one line, before the topic
    event_time, slack = event_time_options(args)
    request = ReplayRequest(
        RangeSpec(args.since, args.until, args.from_offsets, args.to_offsets),
        parse_partitions(args.partitions) if args.partitions else None,
        args.topic,
        event_time=event_time,
        slack=slack,
        archive=args.archive,
    )
    labels = load_task_labels(args.labels)
    auditor = build_auditor(args)
    settings, where = connect(KafkaSettings.from_env(), start_local=False)
    decode = decoder_for(settings)
    with tempfile.TemporaryDirectory(prefix="turnaudit-rebuild-") as scratch:
        traces_path = args.traces or Path(scratch) / "traces.htir.jsonl"
        try:
            result = rebuild_evidence(
                settings,
                decode,
                request,
                labels,
                auditor,
                traces_path=traces_path,
                measure_latency=args.measure_latency,
                timeout=args.read_timeout,
                redaction=(redaction := surface_redaction()),
                opener=turn_opener(settings, redaction),  # sealed turns: opened first
            )
        except (NotReproducedError, AuditorIdentityError) as exc:
            # A finding about the evidence, not a wrong argument: exit 1, no evidence.
            print(f"turnaudit eval rebuild: {exc}", file=sys.stderr)
            return 1
    write_json(args.output, result.evidence.to_json())
    summary = {
        **result.describe(),
        "evidence": str(args.output),
        "evidence_sha256": file_digest(args.output),
    }
    print(f"{where}: rebuilt {json.dumps(summary, sort_keys=True)}")
    if args.report is None:
        return 0
    report = evaluate(result.evidence)
    write_json(args.report, report)
    return print_report(report, args.report)
