"""The archiver's sink under the runtime's rules: whatever the batches, the store failures
and the crashes (the process gone, offsets committed some time before), every record
ends up in exactly one written segment, in order, and the archive checks clean; offsets
never pass a record not yet in a written segment."""

from __future__ import annotations

import contextlib
import errno
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.archive import keyring_of, signing_key
from turnaudit.archive.check import check_archive
from turnaudit.archive.segments import ArchivedRecord, decode_segment
from turnaudit.archive.settings import ArchiveSettings
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.consumers.archive import ArchiveSink, ArchiveValidation
from turnaudit.records import StoredRecord

KEY = signing_key()
TOPIC = "t.turn-events"
BASE_MS = 1_900_000_000_000
POLICY = ArchivePolicy(
    window_ms=10_000, max_bytes=600, seal_grace_s=5, digest_interval_s=20, codec="null"
)


class FailingArchive(LocalArchive):
    """A store whose writes fail (no space left) while ``failures`` lasts."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, durable=False)
        self.failures = 0

    def write_once(self, name: str, data: bytes) -> bool:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write_once(name, data)


@dataclass
class Clock:
    now: float = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    """The runtime, as far as the sink sees it: positions, stored and committed offsets."""

    root: Path
    clock: Clock = field(default_factory=Clock)
    position: dict[int, int] = field(default_factory=dict)
    stored: dict[int, int] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)
    sink: ArchiveSink | None = None
    archive: FailingArchive | None = None

    def start(self, partitions: int) -> ArchiveSink:
        """A new process: its sink, every partition assigned to it (loaded, as the runtime
        assigns them before their first record: a crashed predecessor's undigested segments
        are then this sink's to digest, whether or not a record of them comes)."""
        self.archive = FailingArchive(self.root)
        settings = ArchiveSettings(self.root, KEY, POLICY)
        self.sink = ArchiveSink(
            settings, CollectorRegistry(), archive=self.archive, clock=self.clock, topic=TOPIC
        )
        self.position = dict(self.committed)
        self.stored = dict(self.committed)
        while True:  # the runtime counts a failed assignment hook; a first record loads it
            try:
                self.sink.partitions_assigned(set(range(partitions)))
                break
            except OSError:
                pass
        return self.sink


def stored_records(topic_records: list[list[int]]) -> list[list[StoredRecord]]:
    """Per partition, records at consecutive offsets with the given timestamps (ms)."""
    return [
        [
            StoredRecord(TOPIC, p, o, f"s-{p}".encode(), f"v{p}-{o}".encode() * 8, (), ts)
            for o, ts in enumerate(stamps)
        ]
        for p, stamps in enumerate(topic_records)
    ]


stamps = st.lists(st.integers(0, 3_000), min_size=1, max_size=40).map(
    lambda steps: [BASE_MS + sum(steps[: i + 1]) for i in range(len(steps))]
)


@given(
    partitions=st.lists(stamps, min_size=1, max_size=3),
    seed=st.integers(0, 2**32),
)
def test_batches_failures_and_crashes_leave_every_record_in_exactly_one_segment(
    partitions: list[list[int]], seed: int
) -> None:
    rng = random.Random(seed)
    records = stored_records(partitions)
    with tempfile.TemporaryDirectory() as folder:
        run = Run(Path(folder))
        sink = run.start(len(records))
        while any(run.position.get(p, 0) < len(rs) for p, rs in enumerate(records)):
            batch = []
            for p, rs in enumerate(records):
                start = run.position.get(p, 0)
                taken = rs[start : start + rng.randint(0, 6)]
                batch.extend(taken)
                run.position[p] = start + len(taken)
            handed = ArchiveValidation(sink).examine_batch(batch)
            assert handed is not None
            assert handed.handed == len(batch)
            assert run.archive is not None
            run.archive.failures = rng.choice([0, 0, 0, 1, 3])
            while True:  # the runtime retries a failed flush
                try:
                    sink.flush()
                    break
                except OSError:
                    pass
            held = sink.held_offsets()
            for p, next_offset in handed.next_offsets.items():
                stored = min(next_offset, held.get(p, next_offset))
                assert stored <= next_offset
                run.stored[p] = max(run.stored.get(p, 0), stored)
            run.clock.now += rng.uniform(0, 8)
            if rng.random() < 0.3:
                # A failed tick is counted and logged by the runtime; the next one tries again.
                with contextlib.suppress(OSError):
                    sink.tick()
            if rng.random() < 0.3:  # the auto-committer commits what was stored
                run.committed = dict(run.stored)
            if rng.random() < 0.15:  # SIGKILL: nothing more, and a restart from committed
                sink = run.start(len(records))
        assert run.archive is not None
        run.archive.failures = 0
        sink.close()
        archive = LocalArchive(Path(folder), durable=False)
        report = check_archive(archive, keyring_of(KEY))
        assert report.findings == ()
        for p, rs in enumerate(records):
            held_records = [
                r
                for path in archive.files(f"{TOPIC}/{p}/segments")
                for r in decode_segment(archive.read(path) or b"")
            ]
            assert held_records == [ArchivedRecord.of(r) for r in rs]


def test_a_segment_is_held_until_written_and_released_once_written(tmp_path: Path) -> None:
    clock = Clock()
    registry = CollectorRegistry()
    sink = ArchiveSink(
        ArchiveSettings(tmp_path, KEY, POLICY),
        registry,
        archive=LocalArchive(tmp_path, durable=False),
        clock=clock,
    )

    def gauge(name: str) -> float | None:
        return registry.get_sample_value(f"turnaudit_archive_{name}", {"partition": "0"})

    first = [StoredRecord(TOPIC, 0, o, None, b"v", (), BASE_MS + o) for o in range(3)]
    sink.take_records(first)
    sink.flush()
    assert sink.held_offsets() == {0: 0}  # the window is still open: nothing written
    assert gauge("oldest_unarchived_timestamp_seconds") == BASE_MS / 1000
    assert gauge("archived_offset") is None
    clock.now = BASE_MS / 1000 + POLICY.window_ms / 1000 + POLICY.seal_grace_s
    sink.tick()  # the window ended a grace ago: cut and written
    assert sink.held_offsets() == {}
    assert gauge("oldest_unarchived_timestamp_seconds") is None  # nothing held
    # The partition's first digest is due at once (then every interval).
    assert (gauge("archived_offset"), gauge("undigested_segments")) == (2, 0)
    assert gauge("last_digest_timestamp_seconds") == clock.now
    assert LocalArchive(tmp_path).files(f"{TOPIC}/0/segments") == [
        f"{TOPIC}/0/segments/{0:020d}-{2:020d}.avro"
    ]
    sink.take_records([StoredRecord(TOPIC, 0, 3, None, b"v", (), BASE_MS + 3)])
    sink.flush()
    assert sink.held_offsets() == {0: 3}
    sink.close()
    assert check_archive(LocalArchive(tmp_path), keyring_of(KEY)).findings == ()
