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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypedDict

from turnaudit.errors import TurnAuditError
from turnaudit.evaluation.bundle_contents import (
    AUDITOR_ID,
    EVIDENCE,
    LABELS,
    REPORT,
    REVIEW_PACK,
    SOURCES_DIR,
    member_json,
    verify_contents,
)
from turnaudit.evaluation.errors import BundleCheckError, BundleError
from turnaudit.evaluation.files import (
    AuditorIdentityJson,
    canonical_json,
    parse_evidence,
)
from turnaudit.files import OWNER_ONLY, write_private

BUNDLE_FORMAT = "turn-audit/evr6-bundle"
BUNDLE_FORMAT_VERSION = 1
MANIFEST = "MANIFEST.json"
# tar's ustar names hold 100 bytes; "sources/NN-" plus this keeps well inside.
SOURCE_NAME_LIMIT = 80


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
        members[REVIEW_PACK] = (
            "independent-label review",
            _read(inputs.review_pack, "review pack"),
        )
    sources: list[SourceEntry] = []
    for position, path in enumerate(inputs.sources, start=1):
        member, data = _source_member(position, path), _read(path, "source manifest")
        members[member] = ("source trace manifest", data)
        sources.append({"member": member, "given_as": str(path), "sha256": sha256(data)})
    try:
        evidence = parse_evidence(member_json(EVIDENCE, members[EVIDENCE][1]))
    except TurnAuditError as exc:
        raise BundleError(f"{inputs.evidence}: {exc}") from exc
    identity = evidence.auditor_id.to_json() if evidence.auditor_id else None
    members[AUDITOR_ID] = ("auditor identity", _render(identity) if identity else b"null\n")
    contents = {name: data for name, (_, data) in members.items()}
    try:
        _, report = verify_contents(contents, [s["member"] for s in sources])
    except BundleCheckError as exc:
        raise BundleError(f"these files do not make a bundle: {exc}") from exc

    manifest: BundleManifest = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "decision": report["decision"],
        "auditor_id": identity,
        "members": [
            {"path": name, "role": role, "bytes": len(data), "sha256": sha256(data)}
            for name, (role, data) in sorted(members.items())
        ],
        "sources": sources,
    }
    sealed = {**manifest, "manifest_digest": _manifest_digest(manifest)}
    _write_tar(output, {MANIFEST: _render(sealed), **contents})
    return BundleSummary(
        report["decision"],
        identity["name"] if identity else "none",
        len(members) + 1,
        len(evidence.cases),
        len(sources),
    )


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
    raw = member_json(MANIFEST, data)
    if not isinstance(raw, dict) or raw.get("format") != BUNDLE_FORMAT:
        raise BundleCheckError(MANIFEST, f"not a {BUNDLE_FORMAT} manifest")
    if raw.get("format_version") != BUNDLE_FORMAT_VERSION:
        raise BundleCheckError(
            MANIFEST, f"format_version {raw.get('format_version')!r} is not {BUNDLE_FORMAT_VERSION}"
        )
    if raw.get("manifest_digest") != _manifest_digest(raw):
        raise BundleCheckError(MANIFEST, "changed: its manifest_digest does not match it")
    if _render(raw) != data:
        raise BundleCheckError(MANIFEST, "changed: not in the form the bundle wrote")
    members = tuple(
        (str(path), str(digest), size if isinstance(size, int) else -1)
        for path, digest, size in _entries(raw.get("members"), ("path", "sha256", "bytes"))
    )
    sources = tuple(
        (str(member), str(digest))
        for member, digest in _entries(raw.get("sources"), ("member", "sha256"))
    )
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
                name, f"changed: sha256 {sha256(data)}, the manifest says {digest}"
            )
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
    evidence, report = verify_contents(members, source_members)
    if manifest.decision != report["decision"]:
        raise BundleCheckError(
            MANIFEST, f"decision {manifest.decision!r} is not the report's {report['decision']!r}"
        )
    if manifest.auditor_id != json.loads(json.dumps(report["auditor_id"])):
        raise BundleCheckError(MANIFEST, "auditor_id is not the report's")
    name = evidence.auditor_id.name if evidence.auditor_id else "none"
    return BundleSummary(
        report["decision"], name, len(members), len(evidence.cases), len(source_members)
    )
