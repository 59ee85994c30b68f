"""The gate's integrity requirements: unique ids, sequential step indices, full ordered
prefix coverage, named oracle labels, pinned identities and tier attribution. Any problem
is a hold, listed case by case."""

from __future__ import annotations

import re
from collections.abc import Callable

from turnaudit.evaluation.files import AuditorIdentity, Case, EvidenceFile, composed_digest
from turnaudit.evaluation.gate_report import FailedRequirement, failure

DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
# Integrity failures list this many offending cases in the one-line detail; all are in "cases".
DETAIL_CASE_LIMIT = 10


# The seed's pre-registered integrity requirements, as the report names them.
SEED_INTEGRITY = {
    "integrity.unique_task_ids": "unique ids",
    "integrity.step_indices": "sequential step indices",
    "integrity.prefix_coverage": "full ordered prefix coverage",
    "integrity.labels": "a named oracle label within the trace",
    "integrity.pinned_identity": "pinned identities",
    "integrity.tier_attribution": "pinned identities",
}


def _integrity(requirement: str, problems: dict[str, str]) -> list[FailedRequirement]:
    if not problems:
        return []
    listed = [f"{task_id}: {problem}" for task_id, problem in problems.items()]
    more = len(listed) - DETAIL_CASE_LIMIT
    detail = "; ".join(listed[:DETAIL_CASE_LIMIT]) + (f"; and {more} more" if more > 0 else "")
    seed_name = SEED_INTEGRITY[requirement]
    entry = failure(
        requirement,
        "overall",
        comparison="==",
        threshold=0,
        actual=len(problems),
        detail=f"integrity ({seed_name}): {detail}",
    )
    entry["integrity_requirement"] = seed_name
    entry["cases"] = sorted(problems)
    return [entry]


def _step_index_problem(case: Case) -> str | None:
    if not case.trace.steps:
        return "trace has no steps"
    for position, step in enumerate(case.trace.steps):
        index = step.get("index")
        if isinstance(index, bool) or index != position:
            return f"steps[{position}].index is {index!r}, expected {position}"
    return None


def _prefix_coverage_problem(case: Case) -> str | None:
    expected = list(range(len(case.trace.steps)))
    found = [obs.prefix_end for obs in case.observations or ()]
    if found == expected:
        return None
    missing = sorted(set(expected) - set(found))
    if missing:
        return f"no observation for prefix_end {missing}"
    if len(found) != len(set(found)):
        return "more than one observation for a prefix"
    if set(found) - set(expected):
        return f"prefix_end beyond the trace: {sorted(set(found) - set(expected))}"
    return f"observations out of order: prefix_end {found}"


def _label_problem(case: Case) -> str | None:
    if not case.task_id.strip() or not case.task_family.strip():
        return "empty task_id or task_family"
    if not case.oracle_source.strip():
        return "empty oracle_source: the oracle must be named"
    step = case.oracle_alarm_step
    if step is not None and not 0 <= step < len(case.trace.steps):
        return f"oracle_alarm_step {step} outside the trace's steps 0..{len(case.trace.steps) - 1}"
    return None


def _tier_problems(identity: AuditorIdentity) -> dict[str, str]:
    """What is wrong with the tiers an identity pins (none pinned: nothing to check)."""
    problems: dict[str, str] = {}
    tiers = identity.tiers
    if not tiers:
        return problems
    kinds = [tier.tier for tier in tiers]
    if len(set(kinds)) != len(kinds):
        problems["auditor_id.tiers"] = f"a tier appears twice: {kinds}"
    for i, tier in enumerate(tiers):
        where = f"auditor_id.tiers[{i}]"
        if not tier.name.strip():
            problems[f"{where}.name"] = "empty tier name"
        if not DIGEST_PATTERN.fullmatch(tier.digest):
            problems[f"{where}.digest"] = (
                f"{tier.digest!r} is not sha256: followed by 64 lowercase hex digits"
            )
        if tier.tier == "rules" and not (tier.version or "").strip():
            problems[f"{where}.version"] = "the rules tier names no rule-set version"
    expected = tiers[0].digest if len(tiers) == 1 else composed_digest(tiers)
    if identity.digest != expected:
        pinned = ", ".join(f"{t.tier} {t.name}@{t.version or '-'} {t.digest[:19]}…" for t in tiers)
        problems["auditor_id.tiers"] = (
            f"the digest {identity.digest[:19]}… does not pin these tiers ({pinned}; they "
            f"compose to {expected[:19]}…): a tier's rule-set version or model digest is not "
            "the one the battery ran"
        )
    return problems


def _tier_attribution_problem(tiers: tuple[str, ...]) -> Callable[[Case], str | None]:
    def problem(case: Case) -> str | None:
        for obs in case.observations or ():
            if obs.tier not in tiers:
                return (
                    f"observation {obs.prefix_end} was decided by tier {obs.tier!r}, not "
                    f"by a pinned tier {list(tiers)}"
                )
        return None

    return problem


def integrity_failures(evidence: EvidenceFile) -> list[FailedRequirement]:
    def problems(check: Callable[[Case], str | None]) -> dict[str, str]:
        found: dict[str, str] = {}
        for case in evidence.cases:
            problem = check(case)
            if problem is not None:
                found.setdefault(case.task_id, problem)
        return found

    seen: dict[str, int] = {}
    for case in evidence.cases:
        seen[case.task_id] = seen.get(case.task_id, 0) + 1
    duplicates = {task_id: f"appears {n} times" for task_id, n in seen.items() if n > 1}

    identity_problems: dict[str, str] = {}
    identity = evidence.auditor_id
    if identity is None:
        identity_problems["auditor_id"] = evidence.identity_problem or "auditor_id is missing"
    else:
        if not identity.name.strip():
            identity_problems["auditor_id"] = "auditor_id.name is empty"
        if not DIGEST_PATTERN.fullmatch(identity.digest):
            identity_problems["auditor_id.digest"] = (
                f"{identity.digest!r} is not sha256: followed by 64 lowercase hex digits, "
                "so the auditor under test is not pinned"
            )
        identity_problems.update(_tier_problems(identity))
    pinned_tiers = tuple(t.tier for t in identity.tiers) if identity is not None else ()
    attribution = problems(_tier_attribution_problem(pinned_tiers)) if pinned_tiers else {}

    return [
        *_integrity("integrity.unique_task_ids", duplicates),
        *_integrity("integrity.step_indices", problems(_step_index_problem)),
        *_integrity("integrity.prefix_coverage", problems(_prefix_coverage_problem)),
        *_integrity("integrity.labels", problems(_label_problem)),
        *_integrity("integrity.pinned_identity", identity_problems),
        *_integrity("integrity.tier_attribution", attribution),
    ]
