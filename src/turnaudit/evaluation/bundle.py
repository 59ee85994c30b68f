"""The EVR-6 evidence artifact: one archive a rollout PR carries, and its re-verification.

``make_bundle`` puts into one uncompressed, reproducible tar archive:

=========================== ==============================================================
``MANIFEST.json``           what is in the archive: every other member's path, role, size
                            and sha256, the source manifests' original paths and sha256,
                            the gate decision and the auditor identity; its own
                            ``manifest_digest`` (sha256 of the rest, canonical JSON)
``report.json``             the gate report
``evidence.json``           the evidence the report was computed from
``auditor-id.json``         the pinned auditor identity (both tiers of a two-tier auditor)
``review/labels.json``      the independent labels: a finalized label pack, or the
                            simulator's ground truth
``review/review-pack.json`` the reviewed pack the labels were finalized from (optional)
``sources/N-NAME``          each source trace manifest (eval-manifest JSONL), in order
=========================== ==============================================================

Before writing, it checks what ``check_bundle`` will check, so a bundle that
would not verify is never made. ``check_bundle`` re-verifies an archive: the
manifest is intact (canonical form, its own digest), every member it lists is
there with its digest and nothing else is, the report is exactly the gate's
report recomputed from the evidence (so the decision too), the identity is the
evidence's and the report's, every case has its label and its trace in a source
manifest, and the labels are independent of the auditor. The first failure
names its member (``BundleCheckError``).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypedDict

from turnaudit.errors import TurnAuditError
from turnaudit.evaluation.errors import BundleCheckError, BundleError
from turnaudit.evaluation.files import (
    LABELS_FORMAT,
    AuditorIdentityJson,
    EvidenceFile,
    canonical_json,
    parse_evidence,
    parse_labels,
    trace_digest,
)
from turnaudit.evaluation.gate import GateReport, evaluate
from turnaudit.evaluation.independence import dependence_problems
from turnaudit.files import OWNER_ONLY, write_private

BUNDLE_FORMAT = "turn-audit/evr6-bundle"
BUNDLE_FORMAT_VERSION = 1
MANIFEST = "MANIFEST.json"
REPORT = "report.json"
EVIDENCE = "evidence.json"
AUDITOR_ID = "auditor-id.json"
LABELS = "review/labels.json"
REVIEW_PACK = "review/review-pack.json"
SOURCES_DIR = "sources"
# tar's ustar names hold 100 bytes; "sources/NN-" plus this keeps well inside.
SOURCE_NAME_LIMIT = 80
# Failure messages name at most this many cases.
CASE_LIMIT = 10


class MemberEntry(TypedDict):
    path: str
    role: str
    bytes: int
    sha256: str


class SourceEntry(TypedDict):
    member: str
    given_as: str
    sha256: str


class BundleManifest(TypedDict):
    format: str
    format_version: int
    decision: str
    auditor_id: AuditorIdentityJson | None
    members: list[MemberEntry]
    sources: list[SourceEntry]


@dataclass(frozen=True)
class BundleInputs:
    """The files a bundle is made of (paths as the user gave them)."""

    report: Path
    evidence: Path
    labels: Path
    sources: tuple[Path, ...]
    review_pack: Path | None = None


@dataclass(frozen=True)
class BundleSummary:
    """What a made or checked bundle holds."""

    decision: str
    auditor: str
    members: int
    cases: int
    sources: int


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _render(manifest: Mapping[str, object]) -> bytes:
    """The one byte form a manifest may have: checked byte for byte on --check."""
    return (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _manifest_digest(manifest: Mapping[str, object]) -> str:
    rest = {key: value for key, value in manifest.items() if key != "manifest_digest"}
    return sha256(canonical_json(rest).encode("utf-8"))


def _json(member: str, data: bytes) -> object:
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise BundleCheckError(member, f"not UTF-8 JSON: {exc}") from exc


# --- what both making and checking verify ------------------------------------------------


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
                member, f"line {number} is not an eval-manifest run: {exc!s}") from exc
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
        return {c.task_id: (c.task_family, c.oracle_source, trace_digest(c.trace.steps))
                for c in pack.cases}
    tasks = raw.get("tasks")
    if isinstance(tasks, list) and "seed" in raw:
        index: dict[str, tuple[str, str, str | None]] = {}
        for task in tasks:
            if not isinstance(task, Mapping):
                raise BundleCheckError(member, "a ground-truth task is not an object")
            index[str(task.get("task_id"))] = (
                str(task.get("task_family")), str(task.get("oracle_source")), None)
        return index
    raise BundleCheckError(
        member, f"neither a label pack ({LABELS_FORMAT}) nor simulator ground truth")


def _named(cases: Sequence[str]) -> str:
    more = len(cases) - CASE_LIMIT
    return ", ".join(cases[:CASE_LIMIT]) + (f" and {more} more" if more > 0 else "")


def _first_difference(stored: object, recomputed: object, path: str = "") -> str:
    """Where two JSON values first differ, as a key path."""
    if isinstance(stored, Mapping) and isinstance(recomputed, Mapping):
        for key in sorted(set(stored) | set(recomputed), key=str):
            if stored.get(key) != recomputed.get(key):
                return _first_difference(stored.get(key), recomputed.get(key),
                                         f"{path}.{key}" if path else str(key))
    if isinstance(stored, list) and isinstance(recomputed, list) and len(stored) == len(
            recomputed):
        for i, (left, right) in enumerate(zip(stored, recomputed, strict=True)):
            if left != right:
                return _first_difference(left, right, f"{path}[{i}]")
    return path or "(the whole report)"


def _verify_report(members: Mapping[str, bytes]) -> tuple[EvidenceFile, GateReport]:
    """The report is exactly the gate's report recomputed from the evidence."""
    try:
        evidence = parse_evidence(_json(EVIDENCE, members[EVIDENCE]))
    except BundleCheckError:
        raise
    except TurnAuditError as exc:
        raise BundleCheckError(EVIDENCE, str(exc)) from exc
    recomputed = evaluate(evidence)
    stored = _json(REPORT, members[REPORT])
    if not isinstance(stored, Mapping):
        raise BundleCheckError(REPORT, "not a JSON object")
    if stored.get("decision") != recomputed["decision"]:
        raise BundleCheckError(
            REPORT, f"decision {stored.get('decision')!r}, but the gate recomputed from "
            f"{EVIDENCE} decides {recomputed['decision']!r}")
    # Through JSON, as it was written: tuples become lists, and so on.
    as_written = json.loads(json.dumps(recomputed))
    if stored != as_written:
        raise BundleCheckError(
            REPORT, f"is not the gate's report on {EVIDENCE}: it differs at "
            f"{_first_difference(stored, as_written)}")
    identity = _json(AUDITOR_ID, members[AUDITOR_ID])
    pinned = evidence.auditor_id.to_json() if evidence.auditor_id else None
    if identity != pinned:
        raise BundleCheckError(AUDITOR_ID, f"is not the identity {EVIDENCE} pins ({pinned})")
    return evidence, recomputed


def _verify_labels(members: Mapping[str, bytes], evidence: EvidenceFile) -> None:
    """Every case has its label (same family, oracle and reviewed trace), independent of
    the auditor; with a review pack, every case was reviewed and included."""
    labels = _label_index(LABELS, _json(LABELS, members[LABELS]))
    unlabelled = [case.task_id for case in evidence.cases if case.task_id not in labels]
    relabelled = [case.task_id for case in evidence.cases if case.task_id in labels and (
        labels[case.task_id][:2] != (case.task_family, case.oracle_source)
        or labels[case.task_id][2] not in (None, trace_digest(case.trace.steps)))]
    if unlabelled or relabelled:
        parts = ([f"no label for {_named(unlabelled)}"] if unlabelled else []) + (
            [f"another family, oracle or trace for {_named(relabelled)}"] if relabelled else [])
        raise BundleCheckError(LABELS, "does not hold the labels of the evidence: "
                               + "; ".join(parts))
    if evidence.auditor_id is not None:
        dependent = dependence_problems(
            [{"task_id": task_id, "oracle_source": oracle}
             for task_id, (_, oracle, _) in sorted(labels.items())], evidence.auditor_id)
        if dependent:
            raise BundleCheckError(
                LABELS, f"labels name the auditor under test: {_named(sorted(dependent))}")
    if REVIEW_PACK in members:
        review = _json(REVIEW_PACK, members[REVIEW_PACK])
        cases = review.get("cases") if isinstance(review, Mapping) else None
        included = {str(c.get("task_id")) for c in cases or [] if isinstance(c, Mapping)
                    and isinstance(c.get("review"), Mapping)
                    and c["review"].get("status") == "included"}
        not_reviewed = [case.task_id for case in evidence.cases if case.task_id not in included]
        if not_reviewed:
            raise BundleCheckError(
                REVIEW_PACK, f"no included review for {_named(not_reviewed)}")


def _verify_sources(members: Mapping[str, bytes], sources: Sequence[str],
                    evidence: EvidenceFile) -> None:
    """Every case's trace (same task, same steps) is in a source manifest."""
    traces: dict[str, set[str]] = {}
    for member in sources:
        for task_id, digest in _source_digests(member, members[member]).items():
            traces.setdefault(task_id, set()).add(digest)
    unsourced = [case.task_id for case in evidence.cases
                 if trace_digest(case.trace.steps) not in traces.get(case.task_id, set())]
    if unsourced:
        raise BundleCheckError(
            sources[0] if len(sources) == 1 else SOURCES_DIR,
            f"no source manifest holds the trace of {_named(unsourced)}")


def _verify_contents(members: Mapping[str, bytes], sources: Sequence[str]) -> tuple[
        EvidenceFile, GateReport]:
    """Everything beyond the digests; raises ``BundleCheckError`` naming a member."""
    evidence, report = _verify_report(members)
    _verify_labels(members, evidence)
    _verify_sources(members, sources, evidence)
    return evidence, report


# --- making ------------------------------------------------------------------------------


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BundleError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc


def _source_member(position: int, path: Path) -> str:
    name = path.name[-SOURCE_NAME_LIMIT:] or "manifest.jsonl"
    return f"{SOURCES_DIR}/{position}-{name}"


def make_bundle(inputs: BundleInputs, output: Path) -> BundleSummary:
    """Check the files belong together, then write the archive (atomically)."""
    if not inputs.sources:
        raise BundleError("no --source: the bundle needs the source trace manifest(s)")
    members: dict[str, tuple[str, bytes]] = {
        REPORT: ("gate report", _read(inputs.report, "report")),
        EVIDENCE: ("evidence", _read(inputs.evidence, "evidence")),
        LABELS: ("independent labels", _read(inputs.labels, "labels")),
    }
    if inputs.review_pack is not None:
        members[REVIEW_PACK] = ("independent-label review",
                                _read(inputs.review_pack, "review pack"))
    sources: list[SourceEntry] = []
    for position, path in enumerate(inputs.sources, start=1):
        member, data = _source_member(position, path), _read(path, "source manifest")
        members[member] = ("source trace manifest", data)
        sources.append({"member": member, "given_as": str(path), "sha256": sha256(data)})
    try:
        evidence = parse_evidence(_json(EVIDENCE, members[EVIDENCE][1]))
    except TurnAuditError as exc:
        raise BundleError(f"{inputs.evidence}: {exc}") from exc
    identity = evidence.auditor_id.to_json() if evidence.auditor_id else None
    members[AUDITOR_ID] = ("auditor identity", _render(identity) if identity else b"null\n")
    contents = {name: data for name, (_, data) in members.items()}
    try:
        _, report = _verify_contents(contents, [s["member"] for s in sources])
    except BundleCheckError as exc:
        raise BundleError(f"these files do not make a bundle: {exc}") from exc

    manifest: BundleManifest = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "decision": report["decision"],
        "auditor_id": identity,
        "members": [{"path": name, "role": role, "bytes": len(data), "sha256": sha256(data)}
                    for name, (role, data) in sorted(members.items())],
        "sources": sources,
    }
    sealed = {**manifest, "manifest_digest": _manifest_digest(manifest)}
    _write_tar(output, {MANIFEST: _render(sealed), **contents})
    return BundleSummary(report["decision"], identity["name"] if identity else "none",
                         len(members) + 1, len(evidence.cases), len(sources))


def _write_tar(output: Path, members: Mapping[str, bytes]) -> None:
    """A reproducible tar: members in the given order, no times, owners or modes of the host.

    Owner-only, and so are its members once extracted (mode 0600): it holds traces.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), OWNER_ONLY, 0
            archive.addfile(info, io.BytesIO(data))
    write_private(output, buffer.getvalue())


# --- checking ----------------------------------------------------------------------------


def _read_tar(path: Path) -> dict[str, bytes]:
    archive_name = str(path)
    members: dict[str, bytes] = {}
    try:
        archive = tarfile.open(path, mode="r:")  # noqa: SIM115 - closed by the with below
    except (OSError, tarfile.TarError) as exc:
        raise BundleCheckError(archive_name, f"not a readable tar archive: {exc}") from exc
    with archive:
        try:
            for info in archive:
                name = info.name
                pure = PurePosixPath(name)
                if not info.isfile() or pure.is_absolute() or ".." in pure.parts:
                    raise BundleCheckError(name, "not a plain file inside the bundle")
                if name in members:
                    raise BundleCheckError(name, "appears twice in the archive")
                handle = archive.extractfile(info)
                members[name] = handle.read() if handle is not None else b""
        except tarfile.TarError as exc:
            raise BundleCheckError(archive_name, f"the archive is damaged: {exc}") from exc
    return members


@dataclass(frozen=True)
class _ReadManifest:
    decision: object
    auditor_id: object
    members: tuple[tuple[str, str, int], ...]  # path, sha256, bytes
    sources: tuple[tuple[str, str], ...]  # member, sha256


def _entries(raw: object, keys: tuple[str, ...]) -> list[tuple[object, ...]]:
    if not isinstance(raw, list) or not all(isinstance(e, Mapping) for e in raw):
        raise BundleCheckError(MANIFEST, "members and sources must be arrays of objects")
    return [tuple(entry.get(key) for key in keys) for entry in raw]


def _manifest(data: bytes | None) -> _ReadManifest:
    if data is None:
        raise BundleCheckError(MANIFEST, "missing: this is not an evidence bundle")
    raw = _json(MANIFEST, data)
    if not isinstance(raw, dict) or raw.get("format") != BUNDLE_FORMAT:
        raise BundleCheckError(MANIFEST, f"not a {BUNDLE_FORMAT} manifest")
    if raw.get("format_version") != BUNDLE_FORMAT_VERSION:
        raise BundleCheckError(MANIFEST, f"format_version {raw.get('format_version')!r} is "
                                         f"not {BUNDLE_FORMAT_VERSION}")
    if raw.get("manifest_digest") != _manifest_digest(raw):
        raise BundleCheckError(MANIFEST, "changed: its manifest_digest does not match it")
    if _render(raw) != data:
        raise BundleCheckError(MANIFEST, "changed: not in the form the bundle wrote")
    members = tuple((str(path), str(digest), size if isinstance(size, int) else -1)
                    for path, digest, size in _entries(raw.get("members"),
                                                       ("path", "sha256", "bytes")))
    sources = tuple((str(member), str(digest))
                    for member, digest in _entries(raw.get("sources"), ("member", "sha256")))
    return _ReadManifest(raw.get("decision"), raw.get("auditor_id"), members, sources)


def check_bundle(path: Path) -> BundleSummary:
    """Re-verify an archive; raise ``BundleCheckError`` naming the first member that fails."""
    members = _read_tar(path)
    manifest = _manifest(members.get(MANIFEST))
    listed: set[str] = {MANIFEST}
    for name, digest, size in manifest.members:
        listed.add(name)
        if name not in members:
            raise BundleCheckError(name, "listed in the manifest but missing from the archive")
        data = members[name]
        if sha256(data) != digest or len(data) != size:
            raise BundleCheckError(
                name, f"changed: sha256 {sha256(data)}, the manifest says {digest}")
    extra = sorted(set(members) - listed)
    if extra:
        raise BundleCheckError(extra[0], "in the archive but not in the manifest")
    for required in (REPORT, EVIDENCE, AUDITOR_ID, LABELS):
        if required not in members:
            raise BundleCheckError(required, "missing: every bundle holds it")
    source_members = [member for member, _ in manifest.sources]
    for member, digest in manifest.sources:
        if member not in members or sha256(members[member]) != digest:
            raise BundleCheckError(member, "the source's sha256 is not the member's")
    evidence, report = _verify_contents(members, source_members)
    if manifest.decision != report["decision"]:
        raise BundleCheckError(MANIFEST, f"decision {manifest.decision!r} is not the "
                                         f"report's {report['decision']!r}")
    if manifest.auditor_id != json.loads(json.dumps(report["auditor_id"])):
        raise BundleCheckError(MANIFEST, "auditor_id is not the report's")
    name = evidence.auditor_id.name if evidence.auditor_id else "none"
    return BundleSummary(report["decision"], name, len(members), len(evidence.cases),
                         len(source_members))


