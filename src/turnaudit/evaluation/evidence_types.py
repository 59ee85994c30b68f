"""The EVR-6 evidence file and label pack as typed data: their formats, the JSON shape of
each part, the dataclasses the gate and the builders use, and the content digests that pin
an auditor's tiers and a trace's steps (over canonical JSON)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from turnaudit.evaluation.errors import EvidenceFormatError

EVIDENCE_FORMAT = "turn-audit/evr6-evidence"
LABELS_FORMAT = "turn-audit/evr6-labels"
FORMAT_VERSION = 1

Verdict = Literal["alarm", "ok"]
VERDICTS: tuple[Verdict, ...] = ("alarm", "ok")
# The tiers an auditor decides in: the rules (first tier) and the pinned model (second).
Tier = Literal["rules", "model"]
TIERS: tuple[Tier, ...] = ("rules", "model")
# An HTIR step or a trace's source metadata: open-ended JSON objects whose keys the
# feeder and the review-pack sources define, so they are not typed field by field here.
JsonObject = dict[str, Any]

# A versioned oracle source: NAME@VERSION, e.g. "reviewer-panel@2026-11" or
# "sim-verifier@1.4.0" (docs/evaluation.md, "Independent labels").
ORACLE_SOURCE_FORM = "NAME@VERSION"
_ORACLE_SOURCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+-]*@[A-Za-z0-9][A-Za-z0-9._+-]*")


def oracle_source_problem(oracle_source: object) -> str | None:
    """Why ``oracle_source`` is not a named, versioned source (None when it is one)."""
    if not isinstance(oracle_source, str) or not oracle_source.strip():
        return "has no oracle_source"
    if not _ORACLE_SOURCE.fullmatch(oracle_source):
        return (
            f"oracle_source {oracle_source!r} is not a versioned source: write it as "
            f"{ORACLE_SOURCE_FORM} (e.g. reviewer-panel@2026-11)"
        )
    return None


class TierIdentityJson(TypedDict):
    tier: str
    name: str
    version: str | None
    digest: str


class AuditorIdentityJson(TypedDict):
    name: str
    digest: str
    tiers: list[TierIdentityJson]


class ObservationJson(TypedDict):
    prefix_end: int
    verdict: Verdict
    latency_ms: float
    tier: Tier | None


class TraceJson(TypedDict):
    steps: list[JsonObject]
    source: JsonObject


class _CaseJsonRequired(TypedDict):
    task_id: str
    task_family: str
    oracle_source: str
    oracle_alarm_step: int | None
    trace: TraceJson


class CaseJson(_CaseJsonRequired, total=False):
    observations: list[ObservationJson]  # absent in a label pack


class LabelPackJson(TypedDict):
    format: str
    format_version: int
    cases: list[CaseJson]


class ExclusionJson(TypedDict):
    task_id: str
    reason: str
    detail: str
    source: JsonObject


class EvidenceJson(TypedDict):
    format: str
    format_version: int
    auditor_id: AuditorIdentityJson | None
    cases: list[CaseJson]
    exclusions: list[ExclusionJson]


@dataclass(frozen=True)
class TierIdentity:
    """One tier of an auditor: which tier, what it is, its version (rule set) and digest."""

    tier: Tier
    name: str
    version: str | None
    digest: str

    def to_json(self) -> TierIdentityJson:
        return {
            "tier": self.tier,
            "name": self.name,
            "version": self.version,
            "digest": self.digest,
        }


def composed_digest(tiers: Sequence[TierIdentity]) -> str:
    """The one digest that pins every tier: sha256 of their canonical JSON, in order.

    Changing any tier's name, rule-set version or digest changes it.
    """
    text = canonical_json([tier.to_json() for tier in tiers])
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class AuditorIdentity:
    """The pinned auditor under test: a name and a ``sha256:<64 hex>`` digest.

    ``tiers`` pins what decided: one tier for a single auditor (its digest is the
    auditor's), two for the two-tier auditor (the auditor's digest is
    ``composed_digest(tiers)``). Empty for evidence written before tiers were recorded.
    """

    name: str
    digest: str
    tiers: tuple[TierIdentity, ...] = ()

    def to_json(self) -> AuditorIdentityJson:
        return {
            "name": self.name,
            "digest": self.digest,
            "tiers": [tier.to_json() for tier in self.tiers],
        }


@dataclass(frozen=True)
class Observation:
    """The auditor's verdict on the prefix ``steps[0..prefix_end]``, its latency through
    the whole auditor, and the tier that decided (None for an auditor without tiers)."""

    prefix_end: int
    verdict: Verdict
    latency_ms: float
    tier: Tier | None = None

    def to_json(self) -> ObservationJson:
        return {
            "prefix_end": self.prefix_end,
            "verdict": self.verdict,
            "latency_ms": self.latency_ms,
            "tier": self.tier,
        }


def observation_from_record(record: Mapping[str, object]) -> Observation:
    """An observation as the worker publishes it (``auditor_observation`` v1 or v2)."""
    verdict, tier = record.get("verdict"), record.get("tier")
    prefix_end, latency = record.get("prefix_end"), record.get("latency_ms")
    if verdict not in VERDICTS or tier not in (None, *TIERS):
        raise EvidenceFormatError(f"recorded observation {record!r} has no valid verdict/tier")
    if not isinstance(prefix_end, int) or not isinstance(latency, int | float):
        raise EvidenceFormatError(f"recorded observation {record!r} has no prefix_end/latency")
    return Observation(prefix_end, verdict, float(latency), tier)


@dataclass(frozen=True)
class Trace:
    """An HTIR trace: its steps (HTIR step objects) and where the run came from."""

    steps: tuple[Mapping[str, Any], ...]
    source: Mapping[str, Any]

    def to_json(self) -> TraceJson:
        return {"steps": [dict(step) for step in self.steps], "source": dict(self.source)}


@dataclass(frozen=True)
class Case:
    """One labelled task run; ``observations`` is None in a label pack."""

    task_id: str
    task_family: str
    oracle_source: str
    oracle_alarm_step: int | None
    trace: Trace
    observations: tuple[Observation, ...] | None = None

    @property
    def alarm_positive(self) -> bool:
        return self.oracle_alarm_step is not None

    def to_json(self) -> CaseJson:
        data: CaseJson = {
            "task_id": self.task_id,
            "task_family": self.task_family,
            "oracle_source": self.oracle_source,
            "oracle_alarm_step": self.oracle_alarm_step,
            "trace": self.trace.to_json(),
        }
        if self.observations is not None:
            data["observations"] = [obs.to_json() for obs in self.observations]
        return data


@dataclass(frozen=True)
class LabelPack:
    """Independently labelled cases, without any auditor output."""

    cases: tuple[Case, ...]

    def to_json(self) -> LabelPackJson:
        return {
            "format": LABELS_FORMAT,
            "format_version": FORMAT_VERSION,
            "cases": [case.to_json() for case in self.cases],
        }


@dataclass(frozen=True)
class Exclusion:
    """A labelled trace kept out of the evidence, and why (``reason`` is a closed set)."""

    task_id: str
    reason: str
    detail: str
    source: Mapping[str, Any]

    def to_json(self) -> ExclusionJson:
        return {
            "task_id": self.task_id,
            "reason": self.reason,
            "detail": self.detail,
            "source": dict(self.source),
        }


@dataclass(frozen=True)
class EvidenceFile:
    """Labelled cases plus one pinned-auditor observation per prefix.

    ``auditor_id`` is None when the file's identity is missing or malformed;
    ``identity_problem`` then says what is wrong, and the gate holds on it.
    """

    auditor_id: AuditorIdentity | None
    cases: tuple[Case, ...]
    exclusions: tuple[Exclusion, ...] = ()
    identity_problem: str | None = None

    def to_json(self) -> EvidenceJson:
        return {
            "format": EVIDENCE_FORMAT,
            "format_version": FORMAT_VERSION,
            "auditor_id": None if self.auditor_id is None else self.auditor_id.to_json(),
            "cases": [case.to_json() for case in self.cases],
            "exclusions": [exclusion.to_json() for exclusion in self.exclusions],
        }


# --- content digests --------------------------------------------------------------------


def canonical_json(data: Any) -> str:
    """Sorted keys, no spaces: one text per value, fit for hashing."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def trace_digest(steps: Sequence[Mapping[str, Any]]) -> str:
    """The content hash of a trace's steps: what a label was reviewed on, and what the
    auditor saw. Any changed, added or missing step changes it."""
    text = canonical_json([dict(step) for step in steps])
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
