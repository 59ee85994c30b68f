"""The EVR-6 evidence file and label pack (PIPELINE.md, "Evidence and label-pack files").

Loading checks the *shape* of a file: fields present with the right JSON types.
Whether the content is sound (unique ids, ordered prefix coverage, step indices,
a pinned auditor identity) is the gate's integrity requirement, so that a
broken evidence file yields a ``hold`` report naming the problem rather than a
crash. An ``auditor_id`` that is missing or not shaped like a pinned identity
is such a problem (the seed's "pinned identities"), not a reason to refuse the
file. A label pack is refused outright if it carries any auditor output.

Evidence also names the traces it kept out (``exclusions``: a label whose
reviewed trace is not the trace that arrived, a trace missing a turn, a label
naming a turn the trace never reached), each with its reason.

The typed data (formats, JSON shapes, dataclasses, digests) is in ``evidence_types``;
this module reads, checks and writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from turnaudit.evaluation.errors import ContaminatedLabelPackError, EvidenceFormatError
from turnaudit.evaluation.evidence_types import (
    EVIDENCE_FORMAT,
    FORMAT_VERSION,
    LABELS_FORMAT,
    ORACLE_SOURCE_FORM,
    TIERS,
    VERDICTS,
    AuditorIdentity,
    AuditorIdentityJson,
    Case,
    CaseJson,
    EvidenceFile,
    EvidenceJson,
    Exclusion,
    ExclusionJson,
    JsonObject,
    LabelPack,
    LabelPackJson,
    Observation,
    ObservationJson,
    Tier,
    TierIdentity,
    TierIdentityJson,
    Trace,
    TraceJson,
    Verdict,
    canonical_json,
    composed_digest,
    observation_from_record,
    oracle_source_problem,
    trace_digest,
)
from turnaudit.files import write_private

# The typed data is re-exported: readers take the evidence and its types from here.
__all__ = [
    "EVIDENCE_FORMAT",
    "FORMAT_VERSION",
    "LABELS_FORMAT",
    "ORACLE_SOURCE_FORM",
    "TIERS",
    "VERDICTS",
    "AuditorIdentity",
    "AuditorIdentityJson",
    "Case",
    "CaseJson",
    "EvidenceFile",
    "EvidenceJson",
    "Exclusion",
    "ExclusionJson",
    "JsonObject",
    "LabelPack",
    "LabelPackJson",
    "Observation",
    "ObservationJson",
    "Tier",
    "TierIdentity",
    "TierIdentityJson",
    "Trace",
    "TraceJson",
    "Verdict",
    "canonical_json",
    "composed_digest",
    "load_evidence",
    "load_labels",
    "observation_from_record",
    "oracle_source_problem",
    "parse_evidence",
    "parse_identity",
    "parse_labels",
    "parse_oracle_alarm_step",
    "parse_trace",
    "read_json",
    "trace_digest",
    "write_json",
]


# --- reading and writing JSON ------------------------------------------------------------


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def read_json(path: Path) -> Any:
    """Parse a UTF-8 JSON file, refusing NaN/Infinity (not JSON, and they break comparisons)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise EvidenceFormatError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise EvidenceFormatError(f"{path} is not valid JSON: {exc}") from exc


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically, so a crash never leaves half an evidence file behind;
    owner-only (``turnaudit.files``): evidence and review packs hold traces."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    write_private(Path(path), text.encode("utf-8"))


# --- shape checks ------------------------------------------------------------------------


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise EvidenceFormatError(f"{where} must be a JSON object")
    return cast(Mapping[str, Any], value)


def _list(value: object, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise EvidenceFormatError(f"{where} must be a JSON array")
    return value


def _str(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise EvidenceFormatError(f"{where}.{key} must be a string")
    return value


def _int(value: object, where: str) -> int:
    # bool is an int subclass in Python, but `true` is not a step index.
    if isinstance(value, bool) or not isinstance(value, int):
        raise EvidenceFormatError(f"{where} must be an integer")
    return value


def _header(data: Mapping[str, Any], expected_format: str, what: str) -> None:
    if data.get("format") != expected_format:
        raise EvidenceFormatError(
            f"not a {what}: format is {data.get('format')!r}, expected {expected_format!r}"
        )
    if data.get("format_version") != FORMAT_VERSION:
        raise EvidenceFormatError(
            f"{what} format_version {data.get('format_version')!r} is not supported "
            f"(this build reads version {FORMAT_VERSION})"
        )


def parse_identity(value: object) -> AuditorIdentity:
    data = _object(value, "auditor_id")
    identity, problem = _evidence_identity({"auditor_id": data})
    if identity is None:
        raise EvidenceFormatError(problem or "auditor_id is not an auditor identity")
    return identity


def _parse_tiers(value: object) -> tuple[tuple[TierIdentity, ...], str | None]:
    """``auditor_id.tiers`` (missing in evidence from before tiers: none), or what is wrong."""
    if value is None:
        return (), None
    if not isinstance(value, list):
        return (), f"auditor_id.tiers is {_clip(value)}, not an array"
    tiers = []
    for i, raw in enumerate(value):
        tier = _parse_tier(raw, f"auditor_id.tiers[{i}]")
        if isinstance(tier, str):
            return (), tier
        tiers.append(tier)
    return tuple(tiers), None


def _parse_tier(raw: object, where: str) -> TierIdentity | str:
    """One tier's identity, or what is wrong with it."""
    if not isinstance(raw, Mapping):
        return f"{where} is {_clip(raw)}, not an object"
    if raw.get("tier") not in TIERS:
        return f"{where}.tier is {_clip(raw.get('tier'))}, not one of {list(TIERS)}"
    for key in ("name", "digest"):
        if not isinstance(raw.get(key), str):
            return f"{where}.{key} is {_clip(raw.get(key))}, not a string"
    version = raw.get("version")
    if version is not None and not isinstance(version, str):
        return f"{where}.version is {_clip(version)}, not a string or null"
    return TierIdentity(cast(Tier, raw["tier"]), raw["name"], version, raw["digest"])


def _evidence_identity(data: Mapping[str, Any]) -> tuple[AuditorIdentity | None, str | None]:
    """The file's auditor identity, or None and what is wrong with it."""
    if "auditor_id" not in data:
        return None, "auditor_id is missing: the auditor under test is not pinned"
    value = data["auditor_id"]
    if not isinstance(value, Mapping):
        return None, (
            f"auditor_id is {type(value).__name__} {_clip(value)}, not an object "
            "with a name and a digest"
        )
    if "digest" not in value:
        return None, "auditor_id has no digest: the auditor under test is not pinned"
    for key in ("name", "digest"):
        if not isinstance(value.get(key), str):
            return None, f"auditor_id.{key} is {_clip(value.get(key))}, not a string"
    tiers, problem = _parse_tiers(value.get("tiers"))
    if problem is not None:
        return None, problem
    return AuditorIdentity(name=value["name"], digest=value["digest"], tiers=tiers), None


def _clip(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:60] + "…"


def _parse_exclusion(value: object, where: str) -> Exclusion:
    data = _object(value, where)
    return Exclusion(
        task_id=_str(data, "task_id", where),
        reason=_str(data, "reason", where),
        detail=_str(data, "detail", where),
        source=_object(data.get("source", {}), f"{where}.source"),
    )


def _parse_observation(value: object, where: str) -> Observation:
    data = _object(value, where)
    verdict = data.get("verdict")
    if verdict not in VERDICTS:
        raise EvidenceFormatError(f'{where}.verdict must be "alarm" or "ok", got {verdict!r}')
    latency = data.get("latency_ms")
    if isinstance(latency, bool) or not isinstance(latency, int | float) or latency < 0:
        raise EvidenceFormatError(f"{where}.latency_ms must be a non-negative number")
    tier = data.get("tier")
    if tier is not None and tier not in TIERS:
        raise EvidenceFormatError(
            f"{where}.tier must be one of {list(TIERS)} or null, got {tier!r}"
        )
    return Observation(
        prefix_end=_int(data.get("prefix_end"), f"{where}.prefix_end"),
        verdict=cast(Verdict, verdict),
        latency_ms=float(latency),
        tier=cast("Tier | None", tier),
    )


def parse_trace(value: object, where: str) -> Trace:
    data = _object(value, where)
    steps = tuple(
        _object(step, f"{where}.steps[{i}]")
        for i, step in enumerate(_list(data.get("steps"), f"{where}.steps"))
    )
    return Trace(steps=steps, source=_object(data.get("source"), f"{where}.source"))


def _required(data: Mapping[str, Any], key: str, where: str) -> object:
    # A missing key is not a healthy label: only an explicit null is.
    if key not in data:
        raise EvidenceFormatError(f"{where}: missing {key!r} (null marks a healthy trace)")
    return data[key]


def parse_oracle_alarm_step(value: object, where: str) -> int | None:
    return None if value is None else _int(value, where)


def _parse_case(value: object, where: str, *, with_observations: bool) -> Case:
    data = _object(value, where)
    task_id = _str(data, "task_id", where)
    where = f"case {task_id!r}"
    observations = None
    if with_observations:
        observations = tuple(
            _parse_observation(obs, f"{where}.observations[{i}]")
            for i, obs in enumerate(_list(data.get("observations"), f"{where}.observations"))
        )
    return Case(
        task_id=task_id,
        task_family=_str(data, "task_family", where),
        oracle_source=_str(data, "oracle_source", where),
        oracle_alarm_step=parse_oracle_alarm_step(
            _required(data, "oracle_alarm_step", where), f"{where}.oracle_alarm_step"
        ),
        trace=parse_trace(data.get("trace"), f"{where}.trace"),
        observations=observations,
    )


def parse_evidence(raw: object) -> EvidenceFile:
    """Check an evidence file's shape and build its typed form."""
    data = _object(raw, "evidence file")
    _header(data, EVIDENCE_FORMAT, "evidence file")
    identity, problem = _evidence_identity(data)
    cases = _list(data.get("cases"), "cases")
    # Evidence from before exclusions were recorded has none.
    exclusions = _list(data.get("exclusions", []), "exclusions")
    return EvidenceFile(
        auditor_id=identity,
        cases=tuple(
            _parse_case(case, f"cases[{i}]", with_observations=True) for i, case in enumerate(cases)
        ),
        exclusions=tuple(
            _parse_exclusion(item, f"exclusions[{i}]") for i, item in enumerate(exclusions)
        ),
        identity_problem=problem,
    )


def parse_labels(raw: object) -> LabelPack:
    """Check a label pack's shape; refuse one carrying auditor output."""
    data = _object(raw, "label pack")
    cases = _list(data.get("cases"), "cases")
    # Checked before the format, so an evidence file passed as labels gets the real reason.
    case_objects = [_object(case, f"cases[{i}]") for i, case in enumerate(cases)]
    contaminated = [
        str(case.get("task_id", f"cases[{i}]"))
        for i, case in enumerate(case_objects)
        if "observations" in case
    ]
    if "auditor_id" in data or contaminated:
        found = ["auditor_id"] if "auditor_id" in data else []
        if contaminated:
            found.append(f"observations in case(s) {', '.join(contaminated)}")
        raise ContaminatedLabelPackError(
            f"label pack carries auditor output ({'; '.join(found)}); labels must come "
            "from an independent oracle, never from the auditor under test"
        )
    _header(data, LABELS_FORMAT, "label pack")
    return LabelPack(
        cases=tuple(
            _parse_case(case, f"cases[{i}]", with_observations=False)
            for i, case in enumerate(case_objects)
        )
    )


def load_evidence(path: Path) -> EvidenceFile:
    return parse_evidence(read_json(path))


def load_labels(path: Path) -> LabelPack:
    return parse_labels(read_json(path))
