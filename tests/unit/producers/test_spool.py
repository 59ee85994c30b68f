"""The on-disk spool: order, persistence across reopen, bound, torn tails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.smallfs import small_filesystem
from turnaudit.errors import PublishError, SpoolFullError, SpoolWriteError
from turnaudit.producers.spool import DiskSpool, SpooledMessage


def fill(spool: DiskSpool, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        spool.append("topic", f"k{i}".encode(), f"v{i}".encode())


def test_reads_back_in_append_order_and_commit_forgets(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path)
    fill(spool, 10)
    batch, pos = spool.read_batch(limit=4)
    assert [m.value for m in batch] == [b"v0", b"v1", b"v2", b"v3"]
    spool.commit(pos, len(batch))
    assert len(spool) == 6
    batch, pos = spool.read_batch(limit=100)
    assert [m.key for m in batch] == [f"k{i}".encode() for i in range(4, 10)]
    assert batch[0].topic == "topic"
    spool.commit(pos, len(batch))
    assert len(spool) == 0
    assert spool.size_bytes == 0


def test_survives_reopen_with_cursor(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path)
    fill(spool, 5)
    _batch, pos = spool.read_batch(limit=2)
    spool.commit(pos, 2)
    spool.close()
    reopened = DiskSpool(tmp_path)
    assert len(reopened) == 3
    assert [m.value for m in reopened.read_batch()[0]] == [b"v2", b"v3", b"v4"]


def test_appends_after_a_full_drain_start_clean(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path)
    fill(spool, 3)
    spool.commit(*_all(spool))
    spool.close()
    spool = DiskSpool(tmp_path)
    fill(spool, 2, start=3)
    assert [m.value for m in spool.read_batch()[0]] == [b"v3", b"v4"]


def _all(spool: DiskSpool) -> tuple:  # type: ignore[type-arg]  # rows of mixed types
    batch, pos = spool.read_batch(limit=10_000)
    return pos, len(batch)


def test_bound_refuses_and_keeps_what_it_has(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path, max_bytes=200)
    with pytest.raises(SpoolFullError, match="full"):
        fill(spool, 100)
    kept = len(spool)
    assert 0 < kept < 100
    assert [m.value for m in spool.read_batch()[0]] == [f"v{i}".encode() for i in range(kept)]


def test_a_torn_tail_from_a_crash_is_ignored(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path)
    fill(spool, 3)
    spool.close()
    segment = next(tmp_path.glob("segment-*.spool"))
    with open(segment, "ab") as fh:
        fh.write(b"\x00\x00\x01\x00partial")
    reopened = DiskSpool(tmp_path)
    assert len(reopened) == 3
    assert [m.value for m in reopened.read_batch()[0]] == [b"v0", b"v1", b"v2"]
    # The torn tail was cut off: what is appended now is readable after v2.
    fill(reopened, 2, start=3)
    assert [m.value for m in reopened.read_batch()[0]] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert len(reopened) == 5


def test_requeue_front_puts_older_messages_first(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path)
    fill(spool, 6, start=4)
    _, pos = spool.read_batch(limit=1)
    spool.commit(pos, 1)  # v4 already went out
    older = [SpooledMessage("topic", f"k{i}".encode(), f"v{i}".encode()) for i in range(3)]
    spool.requeue_front(older)
    expected = [b"v0", b"v1", b"v2", b"v5", b"v6", b"v7", b"v8", b"v9"]
    assert [m.value for m in spool.read_batch()[0]] == expected
    assert len(spool) == 8
    spool.close()
    assert [m.value for m in DiskSpool(tmp_path).read_batch()[0]] == expected
    fill(spool := DiskSpool(tmp_path), 1, start=10)
    assert spool.read_batch()[0][-1].value == b"v10"


def test_headers_survive_the_spool(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path)
    spool.append("dlq", b"k", b"v", [("dlq.reason", b"contract:stub_fields"), ("empty", b"")])
    spool.append("events", b"k2", b"v2")
    first, second = spool.read_batch()[0]
    assert first.headers == [("dlq.reason", b"contract:stub_fields"), ("empty", b"")]
    assert second.headers is None


def test_a_full_disk_refuses_whole_records_and_recovers(tmp_path: Path) -> None:
    """On a real tmpfs of 64 KB: ENOSPC leaves no torn record, and appends work
    again once space is back; reopening reads exactly what was accepted."""
    with small_filesystem(tmp_path / "small", 64) as mount_point:
        spool = DiskSpool(mount_point / "spool")
        accepted = []
        refusal = None
        for i in range(100_000):
            try:
                spool.append("topic", b"k", f"value-{i:06d}".encode() * 20)
            except SpoolWriteError as exc:
                refusal = exc
                break
            accepted.append(i)
        assert refusal is not None
        assert "cannot be written: No space left on device" in str(refusal)
        assert len(spool) == len(accepted) > 0
        assert spool.oldest_appended_at is not None
        # Drain half: the cursor is rewritten in place, so it moves on a full disk.
        records = spool.read(limit=len(accepted) // 2)
        spool.commit(records[-1].end, len(records))
        spool.append("topic", b"k", b"after")  # the cut-back torn write left room for it
        spool.close()
        reopened = DiskSpool(mount_point / "spool")
        values = [m.value for m in reopened.read_batch(limit=1 << 20)[0]]
        assert values[:-1] == [f"value-{i:06d}".encode() * 20 for i in accepted[len(records) :]]
        assert values[-1] == b"after"
        reopened.commit(*_all(reopened))
        assert len(reopened) == 0
        assert reopened.oldest_appended_at is None
        assert list((mount_point / "spool").glob("segment-*.spool")) == []


def test_counts_never_go_negative(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path)
    fill(spool, 2)
    _, pos = spool.read_batch()
    with pytest.raises(PublishError, match="commit of 5 records, 2 held"):
        spool.commit(pos, 5)
    assert len(spool) == 2
