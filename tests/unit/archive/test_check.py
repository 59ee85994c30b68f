"""``archive check``: an archive as the archiver leaves it passes, and any changed, missing,
reordered or extra segment or digest is found and named (hypothesis over the records,
the cut of segments and digests, and the change made)."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.archive import archive_records, keyring_of, partition_records, signing_key
from turnaudit.archive.check import FindingKind, check_archive
from turnaudit.archive.digests import decode_digest, sign_digest
from turnaudit.archive.segments import ArchivedRecord, decode_segment, encode_segment
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy

KEY = signing_key()
KEYRING = keyring_of(KEY)
# Small windows and bounds: a few records make several segments and digests.
START_MS = 1_700_000_000_000
POLICY = ArchivePolicy(window_ms=1_000_000, max_bytes=400, codec="null")

two_partitions = st.tuples(
    partition_records(partition=0, max_size=25), partition_records(partition=1, max_size=25)
)


def build(root: Path, partitions: tuple[list[ArchivedRecord], ...], every: int) -> LocalArchive:
    archive = LocalArchive(root, durable=False)
    for records in partitions:
        archive_records(archive, records, KEY, POLICY, digest_every=every)
    return archive


@given(partitions=two_partitions, every=st.integers(1, 4))
def test_an_archive_as_the_archiver_leaves_it_passes_and_holds_every_record(
    partitions: tuple[list[ArchivedRecord], ...], every: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        archive = build(Path(root), partitions, every)
        report = check_archive(archive, KEYRING)
        assert report.findings == ()
        for summary, records in zip(report.partitions, partitions, strict=True):
            assert summary.records == len(records)
            assert (summary.first, summary.last) == (records[0].offset, records[-1].offset)
        # Every record is in exactly one segment, in order.
        for p, records in enumerate(partitions):
            held = [
                r
                for path in archive.files(f"t.turn-events/{p}/segments")
                for r in decode_segment(archive.read(path) or b"")
            ]
            assert held == records


def _flip(archive: LocalArchive, path: str, rng: random.Random) -> None:
    data = bytearray(archive.read(path) or b"")
    at = rng.randrange(len(data))
    data[at] ^= rng.randrange(1, 256)
    (archive.root / path).write_bytes(bytes(data))


def _swap(archive: LocalArchive, one: str, other: str) -> None:
    a, b = archive.read(one) or b"", archive.read(other) or b""
    (archive.root / one).write_bytes(b)
    (archive.root / other).write_bytes(a)


Mutation = Callable[[LocalArchive, random.Random], tuple[set[str], set[FindingKind]]]


def delete_segment(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    path = rng.choice(_segments(archive))
    (archive.root / path).unlink()
    return {path}, {FindingKind.MISSING}


def delete_digest(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    path = rng.choice(_digests(archive))
    listed = decode_digest(archive.read(path) or b"")
    assert listed is not None
    (archive.root / path).unlink()
    # Its own place is named (a hole in the indices), or, when it was the last one, the
    # segments it listed are now in no digest.
    return {path, *(n.path() for n in listed.names())}, {FindingKind.MISSING, FindingKind.EXTRA}


def alter_segment(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    path = rng.choice(_segments(archive))
    _flip(archive, path, rng)
    return {path}, {FindingKind.ALTERED}


def truncate_segment(
    archive: LocalArchive, rng: random.Random
) -> tuple[set[str], set[FindingKind]]:
    path = rng.choice(_segments(archive))
    data = archive.read(path) or b""
    (archive.root / path).write_bytes(data[: rng.randrange(len(data))])
    return {path}, {FindingKind.ALTERED}


def reorder_records(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    path = rng.choice(_segments(archive))
    records = list(decode_segment(archive.read(path) or b""))
    rng.shuffle(records)
    data = encode_segment(records, POLICY.codec) if records else b""
    if data == archive.read(path):  # one record, or the same order drawn
        records.append(records[-1])
        data = encode_segment(records, POLICY.codec)
    (archive.root / path).write_bytes(data)
    return {path}, {FindingKind.ALTERED}


def alter_digest(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    path = rng.choice(_digests(archive))
    _flip(archive, path, rng)
    return {path}, {
        FindingKind.ALTERED,
        FindingKind.BAD_SIGNATURE,
        FindingKind.REORDERED,
        FindingKind.CHAIN_BREAK,
    }


def resign_digest(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    """A digest rewritten (a segment dropped from it) and signed by a key the keyring lacks."""
    path = rng.choice(_digests(archive))
    digest = decode_digest(archive.read(path) or b"")
    assert digest is not None
    forged = sign_digest(digest, signing_key(b"\x01" * 32, "intruder"))
    (archive.root / path).write_bytes(forged.encode())
    return {path}, {FindingKind.BAD_SIGNATURE}


def replace_digest(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    """A digest other than a partition's last, signed anew with the archiver's own key (a
    different time): the digest after it no longer names its hash."""
    followed = [p for p in _digests(archive) if _next_digest_path(p) in _digests(archive)]
    if not followed:
        return set(), set()
    path = rng.choice(followed)
    digest = decode_digest(archive.read(path) or b"")
    assert digest is not None
    again = sign_digest(replace(digest, at_ms=digest.at_ms + 1), KEY)
    (archive.root / path).write_bytes(again.encode())
    return {_next_digest_path(path)}, {FindingKind.CHAIN_BREAK}


def _next_digest_path(path: str) -> str:
    folder, name = path.rsplit("/", 1)
    return f"{folder}/{int(name.split('.')[0]) + 1:010d}.json"


def swap_segments(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    one, other = rng.sample(_segments(archive), 2)
    _swap(archive, one, other)
    # Within a partition, each holds the other's listed bytes; across two, other bytes.
    return {one, other}, {FindingKind.REORDERED, FindingKind.ALTERED}


def swap_digests(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    one, other = rng.sample(_digests(archive), 2)
    _swap(archive, one, other)
    return {one, other}, {FindingKind.REORDERED}


def extra_segment(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    """A segment's bytes under a name of their own, in no digest."""
    source = rng.choice(_segments(archive))
    folder = source.rsplit("/", 1)[0]
    path = f"{folder}/{'9' * 20}-{'9' * 20}.avro"
    (archive.root / path).write_bytes(archive.read(source) or b"")
    return {path}, {FindingKind.EXTRA}


def extra_file(archive: LocalArchive, rng: random.Random) -> tuple[set[str], set[FindingKind]]:
    place = rng.choice(
        ["notes.txt", "t.turn-events/x", "t.turn-events/0/y", "t.turn-events/1/digests/z.json"]
    )
    (archive.root / place).parent.mkdir(parents=True, exist_ok=True)
    (archive.root / place).write_bytes(rng.randbytes(rng.randrange(0, 50)))
    return {place}, {FindingKind.EXTRA}


MUTATIONS: dict[str, tuple[Mutation, int, int]] = {  # and the segments, digests it needs
    "delete_segment": (delete_segment, 1, 1),
    "delete_digest": (delete_digest, 1, 1),
    "alter_segment": (alter_segment, 1, 1),
    "truncate_segment": (truncate_segment, 1, 1),
    "reorder_records": (reorder_records, 1, 1),
    "alter_digest": (alter_digest, 1, 1),
    "resign_digest": (resign_digest, 1, 1),
    "replace_digest": (replace_digest, 1, 2),
    "swap_segments": (swap_segments, 2, 1),
    "swap_digests": (swap_digests, 2, 2),
    "extra_segment": (extra_segment, 1, 1),
    "extra_file": (extra_file, 1, 1),
}


def _segments(archive: LocalArchive) -> list[str]:
    return [p for p in archive.files() if "/segments/" in p]


def _digests(archive: LocalArchive) -> list[str]:
    return [p for p in archive.files() if "/digests/" in p]


@given(
    partitions=two_partitions,
    every=st.integers(1, 3),
    mutation=st.sampled_from(sorted(MUTATIONS)),
    seed=st.integers(0, 2**32),
)
def test_any_change_to_a_segment_or_digest_is_found_and_named(
    partitions: tuple[list[ArchivedRecord], ...], every: int, mutation: str, seed: int
) -> None:
    change, segments_needed, digests_needed = MUTATIONS[mutation]
    with tempfile.TemporaryDirectory() as root:
        archive = build(Path(root), partitions, every)
        if len(_segments(archive)) < segments_needed or len(_digests(archive)) < digests_needed:
            return
        paths, kinds = change(archive, random.Random(seed))
        if not paths:
            return  # no place for this change in this archive
        report = check_archive(archive, KEYRING)
        assert not report.ok
        named = [f for f in report.findings if f.path in paths and f.kind in kinds]
        assert named, (mutation, paths, [f.line() for f in report.findings])


def test_a_finding_is_one_line_naming_kind_and_file(tmp_path: Path) -> None:
    records = [ArchivedRecord("t.turn-events", 0, o, 1000 * o, 1, None, b"v") for o in range(3)]
    archive = LocalArchive(tmp_path)
    archive_records(archive, records, KEY, POLICY)
    (path,) = _segments(archive)
    (tmp_path / path).unlink()
    (finding,) = check_archive(archive, KEYRING).findings
    assert finding.line() == f"missing {path}: listed with 3 records"


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("seed", range(3))
def test_each_change_is_found_in_an_archive_of_many_segments_and_digests(
    tmp_path: Path, mutation: str, seed: int
) -> None:
    """Every kind of change, on an archive with room for each (seven digests and
    fourteen segments per partition)."""
    partitions = tuple(
        [
            ArchivedRecord(
                "t.turn-events", p, o, 1_700_000_000_000 + o * 600_000, 1, None, b"x" * 150
            )
            for o in range(14)
        ]
        for p in (0, 1)
    )
    archive = build(tmp_path, partitions, 2)
    assert check_archive(archive, KEYRING).ok
    paths, kinds = MUTATIONS[mutation][0](archive, random.Random(seed))
    findings = check_archive(archive, KEYRING).findings
    assert [f for f in findings if f.path in paths and f.kind in kinds], [
        f.line() for f in findings
    ]
