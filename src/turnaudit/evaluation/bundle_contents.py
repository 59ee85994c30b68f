"""What a bundle's members must hold, checked alike before a bundle is made and when one
is re-verified: the member names, the report recomputed from the evidence, the identity,
every case's label (independent of the auditor) and its trace in a source manifest.
Every failure names its member (``BundleCheckError``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from turnaudit.errors import TurnAuditError
from turnaudit.evaluation.errors import BundleCheckError
from turnaudit.evaluation.files import (
    LABELS_FORMAT,
    EvidenceFile,
    parse_evidence,
    parse_labels,
    trace_digest,
)
from turnaudit.evaluation.gate import GateReport, evaluate
from turnaudit.evaluation.independence import dependence_problems

REPORT = "report.json"
EVIDENCE = "evidence.json"
AUDITOR_ID = "auditor-id.json"
LABELS = "review/labels.json"
REVIEW_PACK = "review/review-pack.json"
SOURCES_DIR = "sources"
# Failure messages name at most this many cases.
CASE_LIMIT = 10


def member_json(member: str, data: bytes) -> object:
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise BundleCheckError(member, f"not UTF-8 JSON: {exc}") from exc


def _source_digests(member: str, data: bytes) -> dict[str, str]:
    """Task id -> trace content digest, for every run in one eval-manifest JSONL."""
    found: dict[str, str] = {}
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise BundleCheckError(member, f"not UTF-8: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            run = json.loads(line)
            steps = run["trace"]["steps"]
            found[str(run["task_id"])] = trace_digest(steps)
        except (ValueError, KeyError, TypeError) as exc:
            raise BundleCheckError(
                member, f"line {number} is not an eval-manifest run: {exc!s}"
            ) from exc
    return found


def _label_index(member: str, raw: object) -> dict[str, tuple[str, str, str | None]]:
    """Task id -> (family, oracle_source, reviewed trace digest or None for ground truth)."""
    if not isinstance(raw, Mapping):
        raise BundleCheckError(member, "not a JSON object")
    if raw.get("format") == LABELS_FORMAT:
        try:
            pack = parse_labels(raw)
        except TurnAuditError as exc:
            raise BundleCheckError(member, str(exc)) from exc
        return {
            c.task_id: (c.task_family, c.oracle_source, trace_digest(c.trace.steps))
            for c in pack.cases
        }
    tasks = raw.get("tasks")
    if isinstance(tasks, list) and "seed" in raw:
        index: dict[str, tuple[str, str, str | None]] = {}
        for task in tasks:
            if not isinstance(task, Mapping):
                raise BundleCheckError(member, "a ground-truth task is not an object")
            index[str(task.get("task_id"))] = (
                str(task.get("task_family")),
                str(task.get("oracle_source")),
                None,
            )
        return index
    raise BundleCheckError(
        member, f"neither a label pack ({LABELS_FORMAT}) nor simulator ground truth"
    )


def _named(cases: Sequence[str]) -> str:
    more = len(cases) - CASE_LIMIT
    return ", ".join(cases[:CASE_LIMIT]) + (f" and {more} more" if more > 0 else "")


def _first_difference(stored: object, recomputed: object, path: str = "") -> str:
    """Where two JSON values first differ, as a key path."""
    if isinstance(stored, Mapping) and isinstance(recomputed, Mapping):
        for key in sorted(set(stored) | set(recomputed), key=str):
            if stored.get(key) != recomputed.get(key):
                return _first_difference(
                    stored.get(key), recomputed.get(key), f"{path}.{key}" if path else str(key)
                )
    if isinstance(stored, list) and isinstance(recomputed, list) and len(stored) == len(recomputed):
        for i, (left, right) in enumerate(zip(stored, recomputed, strict=True)):
            if left != right:
                return _first_difference(left, right, f"{path}[{i}]")
    return path or "(the whole report)"


def _verify_report(members: Mapping[str, bytes]) -> tuple[EvidenceFile, GateReport]:
    """The report is exactly the gate's report recomputed from the evidence."""
    try:
        evidence = parse_evidence(member_json(EVIDENCE, members[EVIDENCE]))
    except BundleCheckError:
        raise
    except TurnAuditError as exc:
        raise BundleCheckError(EVIDENCE, str(exc)) from exc
    recomputed = evaluate(evidence)
    stored = member_json(REPORT, members[REPORT])
    if not isinstance(stored, Mapping):
        raise BundleCheckError(REPORT, "not a JSON object")
    if stored.get("decision") != recomputed["decision"]:
        raise BundleCheckError(
            REPORT,
            f"decision {stored.get('decision')!r}, but the gate recomputed from "
            f"{EVIDENCE} decides {recomputed['decision']!r}",
        )
    # Through JSON, as it was written: tuples become lists, and so on.
    as_written = json.loads(json.dumps(recomputed))
    if stored != as_written:
        raise BundleCheckError(
            REPORT,
            f"is not the gate's report on {EVIDENCE}: it differs at "
            f"{_first_difference(stored, as_written)}",
        )
    identity = member_json(AUDITOR_ID, members[AUDITOR_ID])
    pinned = evidence.auditor_id.to_json() if evidence.auditor_id else None
    if identity != pinned:
        raise BundleCheckError(AUDITOR_ID, f"is not the identity {EVIDENCE} pins ({pinned})")
    return evidence, recomputed


def _verify_labels(members: Mapping[str, bytes], evidence: EvidenceFile) -> None:
    """Every case has its label (same family, oracle and reviewed trace), independent of
    the auditor; with a review pack, every case was reviewed and included."""
    labels = _label_index(LABELS, member_json(LABELS, members[LABELS]))
    unlabelled = [case.task_id for case in evidence.cases if case.task_id not in labels]
    relabelled = [
        case.task_id
        for case in evidence.cases
        if case.task_id in labels
        and (
            labels[case.task_id][:2] != (case.task_family, case.oracle_source)
            or labels[case.task_id][2] not in (None, trace_digest(case.trace.steps))
        )
    ]
    if unlabelled or relabelled:
        parts = ([f"no label for {_named(unlabelled)}"] if unlabelled else []) + (
            [f"another family, oracle or trace for {_named(relabelled)}"] if relabelled else []
        )
        raise BundleCheckError(
            LABELS, "does not hold the labels of the evidence: " + "; ".join(parts)
        )
    if evidence.auditor_id is not None:
        dependent = dependence_problems(
            [
                {"task_id": task_id, "oracle_source": oracle}
                for task_id, (_, oracle, _) in sorted(labels.items())
            ],
            evidence.auditor_id,
        )
        if dependent:
            raise BundleCheckError(
                LABELS, f"labels name the auditor under test: {_named(sorted(dependent))}"
            )
    if REVIEW_PACK in members:
        review = member_json(REVIEW_PACK, members[REVIEW_PACK])
        cases = review.get("cases") if isinstance(review, Mapping) else None
        included = {
            str(c.get("task_id"))
            for c in cases or []
            if isinstance(c, Mapping)
            and isinstance(c.get("review"), Mapping)
            and c["review"].get("status") == "included"
        }
        not_reviewed = [case.task_id for case in evidence.cases if case.task_id not in included]
        if not_reviewed:
            raise BundleCheckError(REVIEW_PACK, f"no included review for {_named(not_reviewed)}")


def _verify_sources(
    members: Mapping[str, bytes], sources: Sequence[str], evidence: EvidenceFile
) -> None:
    """Every case's trace (same task, same steps) is in a source manifest."""
    traces: dict[str, set[str]] = {}
    for member in sources:
        for task_id, digest in _source_digests(member, members[member]).items():
            traces.setdefault(task_id, set()).add(digest)
    unsourced = [
        case.task_id
        for case in evidence.cases
        if trace_digest(case.trace.steps) not in traces.get(case.task_id, set())
    ]
    if unsourced:
        raise BundleCheckError(
            sources[0] if len(sources) == 1 else SOURCES_DIR,
            f"no source manifest holds the trace of {_named(unsourced)}",
        )


def verify_contents(
    members: Mapping[str, bytes], sources: Sequence[str]
) -> tuple[EvidenceFile, GateReport]:
    """Everything beyond the digests; raises ``BundleCheckError`` naming a member."""
    evidence, report = _verify_report(members)
    _verify_labels(members, evidence)
    _verify_sources(members, sources, evidence)
    return evidence, report
