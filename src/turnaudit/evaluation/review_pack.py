"""Review pack: real-run manifests -> human review -> independent label pack.

Eval-manifest (JSONL, UTF-8): one JSON object per line, one task run per line,
the HTIR trace the feeder writes::

    {"task_id": "fix-0042",
     "task_family": "code-fix",            # must match --source FAMILY=PATH if present
     "trace": {"steps": [<HTIR step>, ...], "source": {<where the run came from>}},
     "context": {"task": "...",            # optional, for reviewers only
                 "tools": [{"name": "...", "arguments": ..., "result": ...}],
                 "final_response": "..."}}

Blank lines are skipped. The family comes from ``--source FAMILY=PATH`` or, for
``--source PATH``, from each line's recorded ``task_family`` (the feeder records
it; a line without one is refused), never from outcomes or task text. A run
found twice (a feeder worker killed after writing its line, the trace written
again by the next owner of its partition) is one case when the copies are equal,
and refused, naming the task, when they differ.

Review pack (JSON): ``{"format": "turn-audit/evr6-review-pack", "format_version": 1,
"cases": [...]}``; each case is a label-pack case plus ``review`` ({"status":
"pending"|"included"|"excluded", anything else the reviewer adds}) and, unless
exported ``--without-context``, ``context`` with every field clipped to
``CONTEXT_FIELD_LIMIT`` characters. Export starts every case pending with a null
``oracle_source`` and ``oracle_alarm_step``: a null step only means "healthy" once a
reviewer sets the case to included and names the oracle as a versioned source,
``NAME@VERSION`` (e.g. ``reviewer-panel@2026-11``); finalize refuses any other form,
naming every such case. Finalize never runs an auditor.

The context goes through the surface policy (``turnaudit.redaction``, dropped by
default): its final response and tool arguments and results are written as the
policy says, whatever the manifest holds. The trace's steps are copied as the
manifest has them (the feeder applied the policy when it wrote them): a label is
bound to its trace's content digest, so the steps must stay the ones the auditor
worker reads on the traces topic.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from turnaudit.argparsing import run_standalone
from turnaudit.evaluation.errors import EvidenceFormatError, ReviewPackError
from turnaudit.evaluation.files import (
    FORMAT_VERSION,
    ORACLE_SOURCE_FORM,
    Case,
    LabelPack,
    TraceJson,
    canonical_json,
    oracle_source_problem,
    parse_oracle_alarm_step,
    parse_trace,
    read_json,
    write_json,
)
from turnaudit.redaction import DROPPED, Redaction, surface_redaction

REVIEW_PACK_FORMAT = "turn-audit/evr6-review-pack"
ReviewStatus = Literal["pending", "included", "excluded"]


class ReviewContext(TypedDict, total=False):
    """What a reviewer reads beside the trace, every field clipped."""

    task: str
    final_response: str
    tools: list[dict[str, str]]
    omitted_tools: int


class Review(TypedDict):
    status: ReviewStatus


class ReviewCase(TypedDict):
    """A case as exported: a label-pack case, pending review, with its context."""

    task_id: str
    task_family: str
    review: Review
    oracle_source: str | None
    oracle_alarm_step: int | None
    trace: TraceJson
    context: NotRequired[ReviewContext]


class ReviewPackJson(TypedDict):
    format: str
    format_version: int
    instructions: str
    cases: list[ReviewCase]


CONTEXT_FIELD_LIMIT = 2_000
CONTEXT_TOOL_LIMIT = 50
STATUSES = ("pending", "included", "excluded")
# Error messages list at most this many case ids, then say how many more.
ERROR_ID_LIMIT = 20
REVIEW_INSTRUCTIONS = (
    "For every case set review.status to included or excluded. An included case needs "
    f"oracle_source (who or what labelled it, with a version: {ORACLE_SOURCE_FORM}, e.g. "
    "reviewer-panel@2026-11) and oracle_alarm_step: the "
    "first step index where intervention is justified, or null for a healthy trace. "
    "Never label from the auditor under test. The context may hold sensitive data: keep "
    "this file local."
)


def _ids(ids: Sequence[str]) -> str:
    more = len(ids) - ERROR_ID_LIMIT
    return ", ".join(ids[:ERROR_ID_LIMIT]) + (f" and {more} more" if more > 0 else "")


def clip(value: Any) -> str:
    """A reviewer-context field as text, cut at ``CONTEXT_FIELD_LIMIT`` with a marker."""
    text = value if isinstance(value, str) else canonical_json(value)
    if len(text) <= CONTEXT_FIELD_LIMIT:
        return text
    return text[:CONTEXT_FIELD_LIMIT] + f"…[truncated {len(text) - CONTEXT_FIELD_LIMIT} chars]"


def _bounded_context(raw: object, where: str, redaction: Redaction = DROPPED) -> ReviewContext:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ReviewPackError(f"{where}: context must be a JSON object")
    context: ReviewContext = {}
    if raw.get("task") is not None:
        context["task"] = clip(raw["task"])
    final = raw.get("final_response")
    if final is not None:
        final = redaction.text(final if isinstance(final, str) else canonical_json(final))
        if final is not None:
            context["final_response"] = clip(final)
    tools = raw.get("tools") or []
    if not isinstance(tools, list):
        raise ReviewPackError(f"{where}: context.tools must be a JSON array")
    context["tools"] = [
        {key: clip(value) for key, value in _tool_context(tool, redaction).items()}
        if isinstance(tool, Mapping)
        else {"name": clip(tool)}
        for tool in tools[:CONTEXT_TOOL_LIMIT]
    ]
    if len(tools) > CONTEXT_TOOL_LIMIT:
        context["omitted_tools"] = len(tools) - CONTEXT_TOOL_LIMIT
    return context


def _tool_context(tool: Mapping[str, Any], redaction: Redaction) -> dict[str, Any]:
    """A tool call's name, arguments and result; arguments and result as the policy says
    (left out when dropped)."""
    call = redaction.tool_io({key: tool.get(key) for key in ("name", "arguments", "result")})
    return {key: value for key, value in call.items() if key == "name" or value is not None}


def _manifest_cases(
    family: str | None, path: Path, without_context: bool, redaction: Redaction = DROPPED
) -> list[tuple[str, ReviewCase]]:
    """The runs of one manifest as pending cases, each with where it was read."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ReviewPackError(f"cannot read manifest {path}: {exc.strerror or exc}") from exc
    cases = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            run = json.loads(line)
        except ValueError as exc:
            raise ReviewPackError(f"{where}: not a JSON object: {exc}") from exc
        if not isinstance(run, Mapping):
            raise ReviewPackError(f"{where}: not a JSON object")
        task_id = run.get("task_id")
        if not isinstance(task_id, str) or not task_id.strip():
            raise ReviewPackError(f"{where}: task_id must be a non-empty string")
        recorded = run.get("task_family")
        if family is None:
            if not isinstance(recorded, str) or not recorded.strip():
                raise ReviewPackError(
                    f"{where}: task {task_id!r} records no task_family; give its source "
                    f"as FAMILY=PATH"
                )
        elif recorded not in (None, family):
            raise ReviewPackError(
                f"{where}: task {task_id!r} says family {recorded!r} but its source "
                f"was given as {family!r}"
            )
        try:
            trace = parse_trace(run.get("trace"), "trace").to_json()
        except EvidenceFormatError as exc:
            raise ReviewPackError(f"{where}: {exc}") from exc
        # Enough to find the original run again, even after the manifest moves.
        trace["source"] = {
            **trace["source"],
            "review_pack": {"manifest": str(path), "line": number},
        }
        case: ReviewCase = {
            "task_id": task_id,
            "task_family": family or str(recorded),
            "review": {"status": "pending"},
            "oracle_source": None,
            "oracle_alarm_step": None,
            "trace": trace,
        }
        if not without_context:
            case["context"] = _bounded_context(run.get("context"), where, redaction)
        cases.append((where, case))
    return cases


def _without_location(case: ReviewCase) -> str:
    """The case as canonical JSON, less where it was read: equal for two copies of one run."""
    source = {k: v for k, v in case["trace"]["source"].items() if k != "review_pack"}
    return canonical_json({**case, "trace": {**case["trace"], "source": source}})


def export(
    sources: Sequence[tuple[str | None, Path]],
    output: Path,
    without_context: bool = False,
    redaction: Redaction = DROPPED,
) -> ReviewPackJson:
    """Write a review pack with every run of every source pending review; return it.

    ``sources``: (family, manifest) pairs; a family of None takes each line's own.
    ``redaction``: what the context holds of the final response and tool I/O.
    """
    if not sources:
        raise ReviewPackError("no --source FAMILY=PATH or --source PATH given")
    first: dict[str, tuple[str, ReviewCase]] = {}
    differing: dict[str, list[str]] = {}
    for family, path in sources:
        for where, case in _manifest_cases(family, path, without_context, redaction):
            seen = first.setdefault(case["task_id"], (where, case))
            if seen[1] is not case and _without_location(seen[1]) != _without_location(case):
                differing.setdefault(case["task_id"], [seen[0]]).append(where)
    if differing:
        named = sorted(differing)[:ERROR_ID_LIMIT]
        more = len(differing) - len(named)
        raise ReviewPackError(
            "task ids appear more than once across the manifests with different runs: "
            + "; ".join(f"{task_id!r} at {', '.join(differing[task_id])}" for task_id in named)
            + (f" and {more} more" if more else "")
        )
    cases = [case for _, case in first.values()]
    pack: ReviewPackJson = {
        "format": REVIEW_PACK_FORMAT,
        "format_version": FORMAT_VERSION,
        "instructions": REVIEW_INSTRUCTIONS,
        "cases": cases,
    }
    write_json(output, pack)
    return pack


def _included_case(raw: Mapping[str, Any]) -> Case:
    task_id, family = raw.get("task_id"), raw.get("task_family")
    where = f"case {task_id!r}"
    if not (
        isinstance(task_id, str) and task_id.strip() and isinstance(family, str) and family.strip()
    ):
        raise ReviewPackError(f"{where} needs a non-empty task_id and task_family")
    oracle_source = raw.get("oracle_source")
    problem = oracle_source_problem(oracle_source)
    if problem is not None or not isinstance(oracle_source, str):
        raise ReviewPackError(f"{where} is included but {problem}")
    try:
        trace = parse_trace(raw.get("trace"), f"{where}.trace")
        step = parse_oracle_alarm_step(raw.get("oracle_alarm_step"), f"{where}.oracle_alarm_step")
    except EvidenceFormatError as exc:
        raise ReviewPackError(str(exc)) from exc
    if step is not None and not 0 <= step < len(trace.steps):
        raise ReviewPackError(
            f"{where}: oracle_alarm_step {step} is outside the trace's steps "
            f"0..{len(trace.steps) - 1}"
        )
    return Case(task_id, family, oracle_source, step, trace)


def finalize(pack_path: Path, output: Path) -> LabelPack:
    """Check every case was reviewed; write the included ones, without review or context."""
    data = read_json(pack_path)
    if not isinstance(data, Mapping) or data.get("format") != REVIEW_PACK_FORMAT:
        raise ReviewPackError(f"{pack_path} is not a review pack (format {REVIEW_PACK_FORMAT!r})")
    raw_cases = data.get("cases")
    if not isinstance(raw_cases, list) or not all(isinstance(c, Mapping) for c in raw_cases):
        raise ReviewPackError(f"{pack_path}: cases must be an array of objects")

    by_status: dict[str, list[Mapping[str, Any]]] = {status: [] for status in STATUSES}
    unknown = []
    for raw in raw_cases:
        review = raw.get("review")
        status = review.get("status") if isinstance(review, Mapping) else None
        if status in by_status:
            by_status[str(status)].append(raw)
        else:
            unknown.append(f"{raw.get('task_id')} ({status!r})")
    if unknown:
        raise ReviewPackError(
            f"review.status must be one of {', '.join(STATUSES)}; found {_ids(unknown)}"
        )
    pending = [str(raw.get("task_id")) for raw in by_status["pending"]]
    if pending:
        raise ReviewPackError(f"{len(pending)} case(s) still pending review: {_ids(pending)}")
    if not by_status["included"]:
        raise ReviewPackError("every case is excluded: nothing to label")
    by_source: dict[str, list[str]] = {}
    for raw in by_status["included"]:
        problem = oracle_source_problem(raw.get("oracle_source"))
        if problem is not None:
            by_source.setdefault(problem, []).append(repr(raw.get("task_id")))
    if by_source:
        count = sum(len(ids) for ids in by_source.values())
        raise ReviewPackError(
            f"{count} included case(s) without a versioned oracle_source "
            f"({ORACLE_SOURCE_FORM}): "
            + "; ".join(f"{_ids(ids)} {problem}" for problem, ids in by_source.items())
        )

    labels = LabelPack(tuple(_included_case(raw) for raw in by_status["included"]))
    duplicates = sorted(
        task_id for task_id, n in Counter(c.task_id for c in labels.cases).items() if n > 1
    )
    if duplicates:
        raise ReviewPackError(f"included task ids appear more than once: {_ids(duplicates)}")
    write_json(output, labels.to_json())
    return labels


# The review pack's command line: ``turnaudit eval review-pack`` and
# ``python -m turnaudit.evaluation.review_pack``.


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
    pack = export(args.source, args.output, args.without_context, surface_redaction())
    print(f"review pack: {len(pack['cases'])} case(s) pending review -> {args.output}")
    return 0


def _finalize(args: argparse.Namespace) -> int:
    labels = finalize(args.pack, args.output)
    healthy = sum(1 for case in labels.cases if not case.alarm_positive)
    print(
        f"label pack: {len(labels.cases)} case(s) ({len(labels.cases) - healthy} "
        f"alarm-positive, {healthy} healthy) -> {args.output}"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover - thin wrapper over the CLI's parser
    sys.exit(run_standalone("python -m turnaudit.evaluation.review_pack", configure_review_pack))
