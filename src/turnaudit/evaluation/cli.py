"""``turnaudit eval …``: the EVR-6 review pack, evidence producer, gate and evidence bundle.

The same parsers serve the ``python -m turnaudit.evaluation.<tool>`` forms through
``run_standalone``, so both spellings accept exactly the same arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from turnaudit.argparsing import OneLineErrorParser
from turnaudit.errors import ConfigurationError, TurnAuditError
from turnaudit.evaluation import review_pack
from turnaudit.evaluation.auditors import (
    PrefixAuditor,
    RuleBasedAuditor,
    RuleConfig,
    TwoTierAuditor,
)
from turnaudit.evaluation.bundle import BundleInputs, check_bundle, make_bundle
from turnaudit.evaluation.errors import BundleCheckError
from turnaudit.evaluation.evidence import produce_evidence
from turnaudit.evaluation.files import read_json
from turnaudit.evaluation.gate import GateReport, exit_code, run_gate
from turnaudit.evaluation.model_auditor import OllamaAuditor
from turnaudit.redaction import surface_redaction

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
Configure = Callable[[argparse.ArgumentParser], None]


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The ``eval`` group; returns its tools, where the CLI adds the stream-wired ones."""
    parser = subparsers.add_parser(
        "eval", help="EVR-6: review packs, auditor evidence and the pass/hold gate"
    )
    tools = parser.add_subparsers(dest="tool", metavar="TOOL", required=True)
    configure_review_pack(
        tools.add_parser(
            "review-pack", help="export manifests for independent labelling; finalize labels"
        )
    )
    configure_evidence(
        tools.add_parser(
            "evidence", help="replay every prefix through the pinned auditor, then gate"
        )
    )
    configure_gate(tools.add_parser("gate", help="apply the pre-registered gate to evidence"))
    configure_bundle(
        tools.add_parser(
            "bundle",
            help="the evidence artifact for a rollout PR: report, evidence, sources, "
            "auditor identity and label review in one archive; --check re-verifies",
        )
    )
    return tools


def configure_review_pack(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = actions.add_parser("export", help="manifests -> review pack, every case pending")
    export.add_argument(
        "--source",
        action="append",
        required=True,
        type=_family_source,
        metavar="[FAMILY=]PATH",
        help="an eval-manifest JSONL and the task family of all its runs; "
        "without FAMILY=, the family each line records (the feeder's "
        "manifests)",
    )
    export.add_argument("--output", type=Path, required=True, help="review pack to write")
    export.add_argument(
        "--without-context",
        action="store_true",
        help="omit task, tool and final-response context from the pack",
    )
    export.set_defaults(handler=_export)
    finalize = actions.add_parser("finalize", help="reviewed pack -> label pack")
    finalize.add_argument("pack", type=Path, help="the reviewed review pack")
    finalize.add_argument("--output", type=Path, required=True, help="label pack to write")
    finalize.set_defaults(handler=_finalize)


def configure_evidence(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("labels", type=Path, help="label pack (no auditor output in it)")
    add_auditor_arguments(parser, default="ollama")
    parser.add_argument("--output", type=Path, required=True, help="evidence file to write")
    parser.add_argument("--report", type=Path, required=True, help="gate report to write")
    parser.set_defaults(handler=_evidence)


def add_auditor_arguments(parser: argparse.ArgumentParser, *, default: str) -> None:
    """The pinned auditor's options, shared with ``turnaudit auditor run``."""
    parser.add_argument(
        "--auditor",
        choices=("two-tier", "ollama", "rules"),
        default=default,
        help="auditor under test: two-tier (the production auditor: the rules "
        "first, escalating what they cannot settle to the pinned model), "
        f"or one tier alone (default: {default})",
    )
    parser.add_argument("--model", help="exact Ollama tag, e.g. qwen3.5:2b")
    parser.add_argument("--expected-digest", help="the tag's pinned SHA-256 (sha256: optional)")
    parser.add_argument(
        "--ollama-url",
        default=DEFAULT_OLLAMA_URL,
        help=f"Ollama base URL (default {DEFAULT_OLLAMA_URL})",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per Ollama request (default 120)"
    )
    parser.add_argument(
        "--auditor-config",
        type=Path,
        help="JSON object of rule-auditor settings (rules and two-tier)",
    )


def configure_gate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("evidence", type=Path, help="evidence file")
    parser.add_argument("--output", type=Path, required=True, help="gate report to write")
    parser.set_defaults(handler=_gate)


def configure_bundle(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "archive", type=Path, nargs="?", help="with --check: the bundle to re-verify"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="re-verify ARCHIVE: every digest, and the gate decision "
        "recomputed from its evidence; exit 1 naming the first member "
        "that fails",
    )
    parser.add_argument("--report", type=Path, help="the gate report")
    parser.add_argument("--evidence", type=Path, help="the evidence the report decided on")
    parser.add_argument(
        "--labels",
        type=Path,
        help="the independent labels: a finalized label pack, or the simulator's ground truth",
    )
    parser.add_argument(
        "--review-pack", type=Path, help="the reviewed pack the labels were finalized from"
    )
    parser.add_argument(
        "--source",
        type=Path,
        action="append",
        default=[],
        help="a source trace manifest (eval-manifest JSONL); repeat for each",
    )
    parser.add_argument("--output", type=Path, help="the archive to write (.tar)")
    parser.set_defaults(handler=_bundle)


def _family_source(text: str) -> tuple[str | None, Path]:
    family, sep, path = text.partition("=")
    if not sep:
        if not text.strip():
            raise argparse.ArgumentTypeError("expected FAMILY=PATH or PATH, got ''")
        return None, Path(text).expanduser()
    if not family.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"expected FAMILY=PATH or PATH, got {text!r}")
    return family.strip(), Path(path).expanduser()


def _export(args: argparse.Namespace) -> int:
    pack = review_pack.export(args.source, args.output, args.without_context, surface_redaction())
    print(f"review pack: {len(pack['cases'])} case(s) pending review -> {args.output}")
    return 0


def _finalize(args: argparse.Namespace) -> int:
    labels = review_pack.finalize(args.pack, args.output)
    healthy = sum(1 for case in labels.cases if not case.alarm_positive)
    print(
        f"label pack: {len(labels.cases)} case(s) ({len(labels.cases) - healthy} "
        f"alarm-positive, {healthy} healthy) -> {args.output}"
    )
    return 0


def build_auditor(args: argparse.Namespace) -> PrefixAuditor:
    if args.auditor == "rules":
        if args.model or args.expected_digest:
            raise ConfigurationError(
                "--model/--expected-digest apply to --auditor two-tier or ollama only"
            )
        return _rules(args)
    if args.auditor_config and args.auditor != "two-tier":
        raise ConfigurationError("--auditor-config applies to --auditor rules or two-tier only")
    if not args.model or not args.expected_digest:
        raise ConfigurationError(
            f"--auditor {args.auditor} needs --model TAG and --expected-digest HEX"
        )
    model = OllamaAuditor(args.ollama_url, args.model, args.expected_digest, timeout=args.timeout)
    return TwoTierAuditor(_rules(args), model) if args.auditor == "two-tier" else model


def _rules(args: argparse.Namespace) -> RuleBasedAuditor:
    settings = read_json(args.auditor_config) if args.auditor_config else {}
    if not isinstance(settings, dict):
        raise ConfigurationError(f"{args.auditor_config} must hold a JSON object")
    return RuleBasedAuditor(RuleConfig.from_mapping(settings))


def _evidence(args: argparse.Namespace) -> int:
    report = produce_evidence(
        args.labels, build_auditor(args), evidence_output=args.output, report_output=args.report
    )
    print(f"evidence: {len(report['traces'])} case(s) -> {args.output}")
    return _print_report(report, args.report)


def _gate(args: argparse.Namespace) -> int:
    return _print_report(run_gate(args.evidence, args.output), args.output)


def _bundle(args: argparse.Namespace) -> int:
    if args.check:
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("report", "evidence", "labels", "review_pack", "output")
            if getattr(args, name) is not None
        ] + (["--source"] if args.source else [])
        if args.archive is None or given:
            raise ConfigurationError(
                "--check takes only the ARCHIVE to re-verify"
                + (f" (not {', '.join(given)})" if given else "")
            )
        try:
            summary = check_bundle(args.archive)
        except BundleCheckError as exc:
            # A finding about the archive, not a wrong argument: exit 1.
            print(f"turnaudit eval bundle: {args.archive}: {exc}", file=sys.stderr)
            return 1
        print(
            f"bundle verified: {summary.members} members, every digest matches; gate "
            f"decision {summary.decision} recomputed from {summary.cases} case(s); auditor "
            f"{summary.auditor} <- {args.archive}"
        )
        return 0
    missing = [
        f"--{name.replace('_', '-')}"
        for name in ("report", "evidence", "labels", "output")
        if getattr(args, name) is None
    ]
    if args.archive is not None or missing or not args.source:
        raise ConfigurationError(
            "eval bundle needs --report, --evidence, --labels, --source (one or more) and "
            "--output"
            + (
                f" (missing {', '.join(missing + ([] if args.source else ['--source']))})"
                if missing or not args.source
                else ""
            )
            + ("; ARCHIVE goes with --check only" if args.archive is not None else "")
        )
    summary = make_bundle(
        BundleInputs(args.report, args.evidence, args.labels, tuple(args.source), args.review_pack),
        args.output,
    )
    print(
        f"bundle: {summary.members} members ({summary.sources} source manifest(s), "
        f"{summary.cases} case(s), gate decision {summary.decision}, auditor "
        f"{summary.auditor}) -> {args.output}"
    )
    return 0


def print_report(report: GateReport, path: Path) -> int:
    """The gate's decision and every failed requirement, one line each; the exit code."""
    return _print_report(report, path)


def _print_report(report: GateReport, path: Path) -> int:
    failed = report["failed_requirements"]
    print(f"EVR-6 gate: {report['decision']} ({len(failed)} requirement(s) failed) -> {path}")
    for failure in failed:
        print(
            f"  {failure['requirement']} [{failure['scope']}]: {failure['actual']} "
            f"vs {failure['comparison']} {failure['threshold']} "
            f"(missed by {failure['missed_by']}): {failure['detail']}"
        )
    tiers = report["tiers"]
    if len(tiers["pinned"]) > 1:
        decided = ", ".join(f"{t['tier']} {t['decided']}" for t in tiers["decided_by"])
        print(f"  tiers: {decided} observation(s) decided; {tiers['escalations']} escalated")
    scope = report["authorization"]
    print(
        f"  a pass is {scope['pass_is']}: it does not {'; '.join(scope['pass_does_not'])}; "
        f"still required: {scope['still_required']}"
    )
    return exit_code(report)


def run_standalone(prog: str, configure: Configure, argv: Sequence[str] | None = None) -> int:
    """The ``python -m`` form of one tool: same parser, same handlers, same exit codes."""
    parser = OneLineErrorParser(prog=prog)
    configure(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except TurnAuditError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
