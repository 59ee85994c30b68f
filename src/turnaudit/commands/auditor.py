"""``turnaudit auditor run``: the auditor-evaluation worker."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from turnaudit.commands.sink import service_registry, service_settings
from turnaudit.consumers.auditor_worker import AuditorEvaluationWorker, evidence_summary
from turnaudit.consumers.settings import ServiceName
from turnaudit.evaluation.cli import add_auditor_arguments, build_auditor
from turnaudit.evaluation.files import write_json
from turnaudit.evaluation.gate import evaluate, exit_code
from turnaudit.evaluation.labels import load_task_labels
from turnaudit.kafka.groups import own_group


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("auditor", help="the auditor-evaluation worker")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser(
        "run",
        help="replay HTIR trace prefixes through the pinned auditor; publish observations; "
        "write evidence for labelled traces",
    )
    run.add_argument(
        "--labels",
        type=Path,
        required=True,
        help="a finalized label pack, or the simulator's ground truth",
    )
    add_auditor_arguments(run, default="rules")
    run.add_argument("--evidence", type=Path, required=True, help="evidence file to write")
    run.add_argument("--report", type=Path, help="also run the gate and write its report here")
    run.add_argument(
        "--group-id",
        default=None,
        help="consumer group (default: a fresh one in the principal's namespace, "
        "<prefix><user>.auditor-run-…, reading from the start; the service's group is "
        "<prefix>auditor-worker)",
    )
    run.add_argument(
        "--traces",
        type=int,
        default=0,
        help="stop after this many distinct traces (default: run until SIGTERM)",
    )
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    settings = service_settings(ServiceName.AUDITOR_WORKER)
    kafka = settings.kafka
    where = f"cluster at {kafka.bootstrap_servers}"
    labels = load_task_labels(args.labels)
    worker = AuditorEvaluationWorker(
        kafka,
        build_auditor(args),
        labels,
        group_id=args.group_id or own_group(kafka, "auditor-run"),
        registry=service_registry(),
        evidence_path=args.evidence,
        settings=settings,
        serve_http=True,
    )
    worker.install_signal_handlers()
    # Written by the worker after the end-of-battery identity check, never before.
    evidence = worker.run(until=(lambda t: t.traces >= args.traces) if args.traces else None)
    print(
        f"{where}: {worker.tally.traces} traces audited; evidence "
        f"{json.dumps(evidence_summary(evidence))} -> {args.evidence}"
    )
    if args.report is None:
        return 0
    report = evaluate(evidence)
    write_json(args.report, report)
    print(f"gate: {report['decision']} -> {args.report}")
    return exit_code(report)
