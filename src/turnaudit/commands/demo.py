"""``turnaudit demo``: the pipeline end to end on the local broker, summarised.

Stages: a fresh topic prefix, signing key and keyring for the run (``demo_run``);
simulate and publish (mostly TurnEvent v4, checkpoints signed by the publisher); read
the stream back; run the log sink, the verdict metrics and the continuous verifier
(``verify --follow --keyring --require-signed``) beside each other over it; verify the
run with the keyring, signatures required; assemble HTIR traces, replay them through
the rule-based auditor and apply the EVR-6 gate. Every figure is reconciled against
the simulator's ground truth; the exit code is 0 only when all match (the gate's own
decision is reported, and a hold is a result, not a failure). Log lines go to
``var/demo/demo.log``: stdout is the summary alone.
"""

from __future__ import annotations

import argparse
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnaudit.cluster import connect
from turnaudit.commands.demo_consumers import run_consumer_stage
from turnaudit.commands.demo_evaluation import EvaluationOutcome, run_evaluation_stage
from turnaudit.commands.demo_follow import DemoFollower
from turnaudit.commands.demo_logging import file_level, logging_to_file
from turnaudit.commands.demo_run import CHECKPOINT_EVERY_TURNS, DemoRun, start_run
from turnaudit.commands.demo_sealing import SEALED_TURNS, run_sealing_stage
from turnaudit.commands.demo_stream import CURRENT_VERSION, stream_rows
from turnaudit.commands.demo_summary import (
    Section,
    gate_lines,
    header_line,
    mismatches,
    section_lines,
)
from turnaudit.commands.demo_trust import publisher_checkpoints, signed_rows
from turnaudit.commands.simulate import add_simulation_arguments, publish_simulation
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.state_topic import ensure_verify_state_topic
from turnaudit.kafka.topics import ensure_topics
from turnaudit.redaction import surface_redaction
from turnaudit.settings import KafkaSettings

OUTPUT_DIR = Path("var/demo")
LOG_FILE = "demo.log"
TURNS_LOG = "turns.jsonl"
# Most sessions write the runtime default; some older runtimes still write v3 and v4 (the
# oldest that sign: v1/v2 turns carry no producer id, so a keyring that requires signatures
# finds them unsigned; docs/trust.md allows them by producer for a migration).
DEMO_SCHEMA_VERSIONS = (3, 4, *(CURRENT_VERSION,) * 6)
# verify --follow's grace for a missing position: the demo's run is whole when it
# reads it, so a gap would be lost at once rather than after the service's 900 s.
FOLLOW_GRACE_S = 2.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the pipeline end to end on the local broker and print a summary"
    )
    add_simulation_arguments(parser)
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds each consumer stage may take"
    )
    parser.set_defaults(
        handler=_demo, spool_dir=OUTPUT_DIR / "spool", schema_versions=DEMO_SCHEMA_VERSIONS
    )


def _demo(args: argparse.Namespace) -> int:
    with logging_to_file(OUTPUT_DIR / LOG_FILE, file_level(args.log_level)):
        lines, ok = _run(args)
    print("\n".join(lines))
    return 0 if ok else 1


def _run(args: argparse.Namespace) -> tuple[list[str], bool]:
    """The summary's lines and whether every figure matched."""
    level = file_level(args.log_level)
    settings, where = connect(KafkaSettings.from_env(), start_local=True)
    run = start_run(settings, OUTPUT_DIR, args.spool_dir)
    settings = run.settings
    ensure_topics(settings)
    ensure_verify_state_topic(settings)
    before = end_offsets(settings, settings.topics.turn_events)

    publisher = CollectorRegistry()
    sim, report, emitter, elapsed = publish_simulation(
        settings,
        argparse.Namespace(**{**vars(args), "spool_dir": run.spool_dir}),
        # Each turn stamped when it is published, as a live runtime's: the continuous
        # verifier holds a partition's event time to the checkpoints' signing time.
        real_time=True,
        checkpoints=run.checkpoints,
        registry=publisher,
    )
    truth = sim.truth
    signed_checkpoints = publisher_checkpoints(publisher)
    stream = stream_rows(
        settings,
        before=before,
        truth=truth,
        emitted=emitter.emitted,
        breached=emitter.breached,
        report=report,
    )
    follower = DemoFollower(
        ServiceSettings(
            ServiceName.VERIFY_FOLLOW, settings, f"turnaudit-demo-verify-follow-{run.run_id}"
        ),
        run.keyring,
        grace_s=FOLLOW_GRACE_S,
        trust_grace_s=2 * run.checkpoints.interval_s,  # verify --follow's default
        start_offsets=before,
    )
    follower.expect(truth.events, len(truth.chained_sessions))
    services = run_consumer_stage(
        settings,
        truth,
        emitter.emitted,
        args.timeout,
        start_offsets=before,
        log_file=OUTPUT_DIR / TURNS_LOG,
        redaction=surface_redaction(),
        beside=[follower],
        log_level=level,
    )
    signed = signed_rows(
        settings,
        before,
        truth,
        keyring=run.keyring,
        keyring_path=run.keyring_path,
        publisher=publisher,
        log_file=OUTPUT_DIR / TURNS_LOG,
    )
    # The sealed stage runs beside the evaluation (mostly waits on the broker): its turns
    # have no task, so the feeder and the evidence rebuild pass them by.
    with ThreadPoolExecutor(max_workers=1) as beside:
        sealing = beside.submit(run_sealing_stage, run, OUTPUT_DIR, args.seed + 1)
        evaluation = run_evaluation_stage(
            settings,
            truth,
            args.timeout,
            start_offsets=before,
            output_dir=OUTPUT_DIR,
            redaction=surface_redaction(),
            log_level=level,
        )
        sealed = sealing.result()
    newest = truth.by_schema_version[CURRENT_VERSION]
    sections = [
        Section(
            f"the stream: {'mostly ' if 2 * newest > truth.events else ''}"
            f"TurnEvent v{CURRENT_VERSION} ({newest} of "
            f"{truth.events} turns); {truth.traced} carry a trace id, {truth.with_model} a "
            "model identity",
            stream,
        ),
        Section(
            f"signed checkpoints: the publisher signs with Ed25519 key {run.key_id} every "
            f"{CHECKPOINT_EVERY_TURNS:,} turns and on close",
            signed,
        ),
        Section(
            "continuous verifier: verify --follow --keyring --require-signed, beside the services",
            follower.rows(truth, signed_checkpoints),
        ),
        Section("consumer services: log sink and verdict metrics", services),
        Section("HTIR traces and the auditor-evaluation worker", evaluation.rows),
        Section(
            f"sealed surfaces: {SEALED_TURNS} more v5 turns sealed with a generated surface "
            f"keyring ({sealed.keyring_path})",
            sealed.rows,
        ),
    ]
    lines = [
        f"turnaudit demo on the {where}",
        f"run {run.run_id}: {truth.events} turns (seed {args.seed}, {len(truth.sessions)} "
        f"sessions, {len(truth.tasks)} tasks) published in {elapsed:.1f}s to {run.prefix}*",
        header_line(),
    ]
    for section in sections:
        lines += section_lines(section)
    lines += gate_lines(evaluation.report, evaluation.left_out)
    lines += _files_lines(run, evaluation)
    wrong = mismatches(sections)
    if wrong:
        lines.append(f"demo: MISMATCH in {len(wrong)} figure(s): {', '.join(wrong)}")
    else:
        checks = sum(len(s.rows) for s in sections)
        lines.append(
            f"demo: all {checks} figures match the simulator's ground truth; gate decision: "
            f"{evaluation.report['decision']}"
        )
    return lines, not wrong


def _files_lines(run: DemoRun, evaluation: EvaluationOutcome) -> list[str]:
    def name(path: Path) -> str:
        return str(path.relative_to(OUTPUT_DIR)) if path.is_relative_to(OUTPUT_DIR) else str(path)

    written = [
        f"{LOG_FILE} (the log lines)",
        f"{TURNS_LOG} (the log sink's)",
        name(run.keyring_path),
        f"{name(run.key_path)} (owner-only) and .pub",
        name(evaluation.manifest_path),
        name(evaluation.evidence_path),
        name(evaluation.report_path),
        name(evaluation.bundle_path),
    ]
    text = f"files in {OUTPUT_DIR}/: " + ", ".join(written)
    lines = textwrap.wrap(text, width=100, subsequent_indent="  ", break_on_hyphens=False)
    lines.append(
        f"  re-verify: TURNAUDIT_TOPIC_PREFIX={run.prefix} turnaudit verify "
        f"--keyring {run.keyring_path} --require-signed"
    )
    return lines
