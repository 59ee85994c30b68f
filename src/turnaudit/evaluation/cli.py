"""``turnaudit eval …``: the EVR-6 review pack, evidence producer, gate and evidence bundle.

Each tool's parser lives with the tool (``review_pack``, ``evidence``, ``gate``),
which serves its ``python -m turnaudit.evaluation.<tool>`` form through
``turnaudit.argparsing.run_standalone``: both spellings accept exactly the same
arguments. Only the bundle is this module's own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from turnaudit.errors import ConfigurationError
from turnaudit.evaluation.bundle import BundleInputs, check_bundle, make_bundle
from turnaudit.evaluation.errors import BundleCheckError
from turnaudit.evaluation.evidence import configure_evidence
from turnaudit.evaluation.gate import configure_gate
from turnaudit.evaluation.review_pack import configure_review_pack


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
