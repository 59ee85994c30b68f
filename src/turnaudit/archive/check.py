"""``turnaudit archive check``: every digest, every segment, and the chains between them.

Per partition folder (``<topic>/<partition>``):

* every digest decodes, sits under its own index, is signed by a keyring key valid when
  it was signed, and names the hash of the digest before it (``prev``); indices run
  0, 1, 2 … without a hole;
* every segment a digest lists is there with the SHA-256 the digest gives, decodes, and
  holds the listed count of records of that topic and partition, in offset order, within
  its range; the listed segments follow one another (each one's ``after`` is the last
  offset of the one before), so none is taken out between two others;
* every file is a listed segment or a digest: anything else is extra (a segment written
  after the last digest is too, until the next digest lists it).

Each finding names its kind and the file; ``check_archive`` returns them all. The last
digest itself can be removed unseen (nothing after it names it), as with CloudTrail:
compare its index with what the archiver's metrics last said.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from turnaudit.archive.digests import (
    DIGEST_FOLDER,
    ArchiveDigest,
    SegmentEntry,
    decode_digest,
    digest_index,
    digest_path,
    signature_problem,
)
from turnaudit.archive.segments import (
    SEGMENT_FOLDER,
    SegmentName,
    decode_segment,
    partition_folder,
    sha256_hex,
)
from turnaudit.archive.store import ArchiveStore
from turnaudit.chain import GENESIS_HASH
from turnaudit.keyring import Keyring


class FindingKind(enum.StrEnum):
    MISSING = "missing"  # a listed segment or a digest index is not there
    EXTRA = "extra"  # a file no digest lists
    ALTERED = "altered"  # bytes other than the ones signed for
    REORDERED = "reordered"  # a file under another file's name, a list out of order
    BAD_SIGNATURE = "bad-signature"  # unknown key, key not valid then, or a failing signature
    CHAIN_BREAK = "chain-break"  # a digest whose prev is not its predecessor's hash
    DUPLICATE = "duplicate"  # offsets archived twice


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    path: str
    kind: FindingKind
    detail: str

    def line(self) -> str:
        return f"{self.kind.value} {self.path}: {self.detail}"


@dataclass(frozen=True)
class PartitionSummary:
    """What a partition's archive holds once checked."""

    topic: str
    partition: int
    digests: int
    segments: int
    records: int
    first: int | None  # first archived offset
    last: int | None  # last archived offset


@dataclass(frozen=True)
class ArchiveReport:
    findings: tuple[Finding, ...]
    partitions: tuple[PartitionSummary, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


def check_archive(archive: ArchiveStore, keyring: Keyring) -> ArchiveReport:
    findings: list[Finding] = []
    summaries = []
    for topic in archive.folders():
        partitions = sorted(
            int(name)
            for name in archive.folders(topic)
            if name.isdigit() and str(int(name)) == name
        )
        known = {str(p) for p in partitions}
        for path in archive.files(topic):
            if path.split("/")[1] not in known:
                findings.append(Finding(path, FindingKind.EXTRA, "not in a partition's folders"))
        for partition in partitions:
            summary, found = _check_partition(archive, keyring, topic, partition)
            summaries.append(summary)
            findings.extend(found)
    for path in archive.files():
        if "/" not in path:
            findings.append(Finding(path, FindingKind.EXTRA, "not in a topic's folder"))
    return ArchiveReport(tuple(sorted(findings)), tuple(summaries))


def _check_partition(
    archive: ArchiveStore, keyring: Keyring, topic: str, partition: int
) -> tuple[PartitionSummary, list[Finding]]:
    folder = partition_folder(topic, partition)
    findings: list[Finding] = []
    digests = _read_digests(archive, keyring, topic, partition, findings)
    listed: dict[SegmentName, tuple[SegmentEntry, str]] = {}  # and the digest listing it
    by_hash: dict[str, SegmentName] = {}
    for digest in digests:
        firsts = [s.first for s in digest.segments]
        if firsts != sorted(firsts):
            findings.append(
                Finding(digest.path(), FindingKind.REORDERED, "segments not in offset order")
            )
        for entry in digest.segments:
            name = entry.name(topic, partition)
            if name in listed:
                findings.append(
                    Finding(
                        name.path(),
                        FindingKind.DUPLICATE,
                        f"listed by {listed[name][1]} and {digest.path()}",
                    )
                )
                continue
            listed[name] = (entry, digest.path())
            by_hash[entry.sha256] = name
    records = 0
    for name, (entry, _) in sorted(listed.items()):
        problem = _check_segment(archive, name, entry, by_hash)
        if problem is not None:
            findings.append(problem)
        else:
            records += entry.records
    findings.extend(_continuity(sorted(listed.items())))
    for path in archive.files(folder):
        inside = path[len(folder) + 1 :]
        kind, _, file_name = inside.partition("/")
        if kind == DIGEST_FOLDER and digest_index(file_name) is not None:
            continue  # judged above
        if kind == SEGMENT_FOLDER:
            parsed = SegmentName.parse(topic, partition, file_name)
            if parsed is not None and parsed in listed:
                continue
            findings.append(Finding(path, FindingKind.EXTRA, "a file no digest lists"))
            continue
        findings.append(Finding(path, FindingKind.EXTRA, "neither a segment nor a digest"))
    ordered = sorted(listed)
    summary = PartitionSummary(
        topic,
        partition,
        len(digests),
        len(listed),
        records,
        ordered[0].first if ordered else None,
        ordered[-1].last if ordered else None,
    )
    return summary, findings


def _read_digests(
    archive: ArchiveStore, keyring: Keyring, topic: str, partition: int, findings: list[Finding]
) -> list[ArchiveDigest]:
    """The partition's digests that decode, by index; what is wrong with them in
    ``findings`` (a digest with a bad signature still lists its segments, which are
    checked: the finding names the digest)."""
    folder = f"{partition_folder(topic, partition)}/{DIGEST_FOLDER}"
    read: dict[int, ArchiveDigest] = {}
    for path in archive.files(folder):
        index = digest_index(path.rsplit("/", 1)[1])
        if index is None:
            continue  # reported as extra with the partition's other files
        digest = decode_digest(archive.read(path) or b"")
        if digest is None:
            findings.append(Finding(path, FindingKind.ALTERED, "not a digest"))
            continue
        if (digest.topic, digest.partition, digest.index) != (topic, partition, index):
            findings.append(
                Finding(
                    path,
                    FindingKind.REORDERED,
                    f"holds digest {digest.index} of {digest.topic}/{digest.partition}",
                )
            )
            continue
        problem = signature_problem(digest, keyring)
        if problem is not None:
            findings.append(Finding(path, FindingKind.BAD_SIGNATURE, problem))
        read[index] = digest
    if not read:
        return []
    for index in range(max(read) + 1):
        digest = read.get(index)
        if digest is None:
            findings.append(
                Finding(digest_path(topic, partition, index), FindingKind.MISSING, "no digest")
            )
            continue
        before = read.get(index - 1)
        expected = GENESIS_HASH if index == 0 else (None if before is None else before.hash())
        if expected is not None and digest.prev != expected:
            findings.append(
                Finding(
                    digest.path(),
                    FindingKind.CHAIN_BREAK,
                    "prev is not the hash of the digest before",
                )
            )
    return [read[i] for i in sorted(read)]


def _check_segment(
    archive: ArchiveStore,
    name: SegmentName,
    entry: SegmentEntry,
    by_hash: dict[str, SegmentName],
) -> Finding | None:
    path = name.path()
    data = archive.read(path)
    if data is None:
        return Finding(path, FindingKind.MISSING, f"listed with {entry.records} records")
    digest = sha256_hex(data)
    if digest != entry.sha256:
        other = by_hash.get(digest)
        if other is not None:
            return Finding(path, FindingKind.REORDERED, f"holds segment {other.path()}")
        return Finding(path, FindingKind.ALTERED, "SHA-256 differs from its digest's")
    try:
        held = [(r.topic, r.partition, r.offset) for r in decode_segment(data)]
    except ValueError as exc:
        return Finding(path, FindingKind.ALTERED, f"signed, but does not decode: {exc}")
    offsets = [o for t, p, o in held if (t, p) == (name.topic, name.partition)]
    fits = (
        len(held) == len(offsets) == entry.records
        and offsets == sorted(set(offsets))
        and offsets[0] == name.first
        and offsets[-1] == name.last
    )
    if not fits or len(data) != entry.bytes:
        return Finding(path, FindingKind.ALTERED, "signed, but its records are not its range's")
    return None


def _continuity(listed: list[tuple[SegmentName, tuple[SegmentEntry, str]]]) -> list[Finding]:
    """Each listed segment follows the one before: its ``after`` is that one's last offset."""
    findings = []
    before: SegmentName | None = None
    for name, (entry, _) in listed:
        if before is not None and name.first <= before.last:
            findings.append(
                Finding(
                    name.path(),
                    FindingKind.DUPLICATE,
                    f"offsets {name.first}-{min(name.last, before.last)} are in "
                    f"{before.path()} too",
                )
            )
        elif entry.after != (None if before is None else before.last):
            gap = "the partition's first" if before is None else f"after offset {before.last}"
            findings.append(
                Finding(
                    name.path(),
                    FindingKind.MISSING,
                    f"follows offset {entry.after}, but comes {gap}: a segment is missing",
                )
            )
        before = name
    return findings
