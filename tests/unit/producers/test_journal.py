"""The publisher's journal: a crash at any byte leaves a readable journal whose
whole records come back and whose torn tail is cut off, never a partial record or
an exception; the group commit fsyncs, hands over in ticket order, and forgets
segments once every ticket in them is acknowledged; a crashed publisher's journal
goes in front of the spool."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.events import encode, turn
from tests.support.smallfs import fill_disk, small_filesystem
from turnaudit.errors import ConfigurationError
from turnaudit.producers.journal import (
    ACK_FLUSH_S,
    JOURNAL_ENV,
    Journal,
    JournalMode,
    journal_from_env,
    recover_journal,
)
from turnaudit.producers.journal_records import (
    JournalEntry,
    frame,
    frame_acks,
    left_journals,
    parse,
    parse_records,
    read_journal,
)
from turnaudit.producers.ordering import shipped_position_reader
from turnaudit.producers.spool import DiskSpool, SpooledMessage

entries = st.lists(
    st.builds(
        JournalEntry,
        st.sampled_from(["t.turn-events", "t.dlq", "ü"]),
        st.binary(max_size=40),
        st.binary(max_size=200),
    ),
    min_size=0,
    max_size=12,
)


def written(items: list[JournalEntry]) -> tuple[bytes, list[int]]:
    """The journal's bytes and the offset at which each record ends."""
    data, ends = b"", []
    for item in items:
        data += frame(item)
        ends.append(len(data))
    return data, ends


class TestReadingAfterAKill:
    @given(entries, st.data())
    def test_a_cut_at_any_byte_returns_exactly_the_records_before_it(
        self, items: list[JournalEntry], data: st.DataObject
    ) -> None:
        raw, ends = written(items)
        cut = data.draw(st.integers(0, len(raw)))
        got, good = parse(raw[:cut])
        whole = sum(1 for end in ends if end <= cut)
        assert got == items[:whole]
        assert good == (ends[whole - 1] if whole else 0)

    @given(entries, st.binary(min_size=1, max_size=300))
    def test_garbage_after_the_records_is_never_read_as_a_record(
        self, items: list[JournalEntry], garbage: bytes
    ) -> None:
        raw, _ = written(items)
        got, good = parse(raw + garbage)
        assert got == items
        assert good == len(raw)

    @given(entries, st.data())
    def test_a_flipped_byte_ends_the_journal_at_the_record_it_hit(
        self, items: list[JournalEntry], data: st.DataObject
    ) -> None:
        raw, ends = written(items)
        if not raw:
            return
        at = data.draw(st.integers(0, len(raw) - 1))
        damaged = raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :]
        got, _ = parse(damaged)
        hit = next(i for i, end in enumerate(ends) if at < end)
        assert got == items[:hit]

    @settings(max_examples=40)
    @given(entries, st.data())
    def test_a_torn_file_is_cut_back_on_reading_and_takes_appends_again(
        self, items: list[JournalEntry], data: st.DataObject
    ) -> None:
        raw, ends = written(items)
        cut = data.draw(st.integers(0, len(raw)))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "p-0000000000.journal"
            path.write_bytes(raw[:cut])
            whole = sum(1 for end in ends if end <= cut)
            assert read_journal(path) == items[:whole]
            assert path.stat().st_size == (ends[whole - 1] if whole else 0)
            extra = JournalEntry("t.turn-events", b"k", b"v")
            with path.open("ab") as fh:
                fh.write(frame(extra))
            assert read_journal(path) == [*items[:whole], extra]

    def test_an_unreadable_journal_reads_as_empty(self, tmp_path: Path) -> None:
        (tmp_path / "x.journal").mkdir()
        assert read_journal(tmp_path / "x.journal") == []


def unacknowledged(folder: Path) -> list[JournalEntry]:
    found = []
    for path in left_journals(folder):
        got, acked, _ = parse_records(path.read_bytes())
        found += [e for i, e in enumerate(got) if i not in acked]
    return found


class TestAcknowledgementsOnDisk:
    @given(entries, st.data())
    def test_a_file_gives_back_exactly_the_entries_not_acknowledged_before_any_cut(
        self, items: list[JournalEntry], data: st.DataObject
    ) -> None:
        """Entries and acknowledgement records interleaved as the committer writes them
        (an acknowledgement only after its entry): cut anywhere, the file gives back the
        whole entries before the cut less those an acknowledgement before the cut names."""
        raw, ends, acked_at = b"", [], []
        for index, item in enumerate(items):
            raw += frame(item)
            ends.append(len(raw))
            acked_at.append(None)
            done = data.draw(st.lists(st.integers(0, index), max_size=3, unique=True))
            if done:
                raw += frame_acks(done)
                for i in done:
                    acked_at[i] = acked_at[i] or len(raw)
        cut = data.draw(st.integers(0, len(raw)))
        got, acked, _ = parse_records(raw[:cut])
        whole = sum(1 for end in ends if end <= cut)
        assert got == items[:whole]
        assert acked == {i for i, at in enumerate(acked_at) if at is not None and at <= cut}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "p-0000000000.journal"
            path.write_bytes(raw[:cut])
            assert read_journal(path) == [e for i, e in enumerate(got) if i not in acked]

    @settings(max_examples=25, deadline=None)
    @given(
        st.integers(1, 40),
        st.integers(3, 12),
        st.sets(st.integers(0, 39)),
        st.booleans(),
    )
    def test_after_a_crash_only_turns_not_acknowledged_come_back(
        self, turns: int, segment: int, acked: set[int], later_commit: bool
    ) -> None:
        """Any turns, any segment size, any set acknowledged: once the acknowledgements
        had their flush (a later commit carries them, or ACK_FLUSH_S passes with none),
        the journal a killed publisher leaves holds exactly the turns not acknowledged."""
        acked = {t for t in acked if t < turns}
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "journal"
            journal = Journal(folder, "p", lambda group: None, segment_entries=segment)
            values = [JournalEntry("t", b"k", str(i).encode()) for i in range(turns)]
            for value in values:
                ticket = journal.append(value)
                assert ticket is not None
                journal.wait(ticket)
            for ticket in sorted(acked):
                journal.ack(ticket)
            if later_commit:
                extra = journal.append(JournalEntry("t", b"k", b"after"))
                assert extra is not None
                journal.wait(extra)
                values.append(JournalEntry("t", b"k", b"after"))
            # Killed here: nothing closed. What a successor would read (without a later
            # commit, once ACK_FLUSH_S has passed: asked until then and a while after).
            expected = [v for i, v in enumerate(values) if i not in acked]
            deadline = time.monotonic() + ACK_FLUSH_S * 20
            while True:
                left = unacknowledged(folder)  # read only: the committer may be writing
                if left == expected or later_commit or time.monotonic() > deadline:
                    break
                time.sleep(ACK_FLUSH_S / 4)
            assert left == expected
            journal.close()


class TestGroupCommit:
    def test_every_ticket_is_handed_over_once_in_order_and_fewer_fsyncs_than_turns(
        self, tmp_path: Path
    ) -> None:
        handed: list[int] = []
        journal = Journal(
            tmp_path / "journal",
            "p",
            lambda group: handed.extend(t for t, _ in group),
            segment_entries=50,
        )
        lock = threading.Lock()
        tickets: list[int] = []

        def publish(n: int) -> None:
            for i in range(n):
                with lock:  # the publisher's lock: stamping order is ticket order
                    ticket = journal.append(JournalEntry("t", b"k", str(i).encode()))
                assert ticket is not None
                journal.wait(ticket)
                tickets.append(ticket)

        threads = [threading.Thread(target=publish, args=(100,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        journal.close()
        assert handed == list(range(400))
        assert sorted(tickets) == list(range(400))
        assert journal.commits < 400  # callers waiting together shared fsyncs
        on_disk = [e for path in left_journals(tmp_path / "journal") for e in read_journal(path)]
        assert len(on_disk) == 400

    def test_segments_whose_tickets_are_all_acknowledged_are_deleted(self, tmp_path: Path) -> None:
        journal = Journal(tmp_path / "journal", "p", lambda group: None, segment_entries=10)
        for i in range(35):
            ticket = journal.append(JournalEntry("t", b"k", bytes([i])))
            assert ticket is not None
            journal.wait(ticket)
        for ticket in [*range(0, 10), *range(20, 30), 31]:  # segments 0 and 2 complete
            journal.ack(ticket)
        names = sorted(p.name for p in left_journals(tmp_path / "journal"))
        assert names == ["p-0000000001.journal", "p-0000000003.journal"]
        journal.close()
        assert journal.append(JournalEntry("t", b"k", b"late")) is None
        journal.discard()
        assert left_journals(tmp_path / "journal") == []


class TestAFullDisk:
    def test_a_failed_commit_leaves_whole_records_and_callers_go_on_without_it(
        self, tmp_path: Path
    ) -> None:
        """A really full tmpfs: the commit that hits ENOSPC is cut back, its waiter
        gets the OSError (the publisher then hands the turn over without the
        journal), and later appends are declined rather than queued forever."""
        with small_filesystem(tmp_path / "small", 256) as mount:
            journal = Journal(mount / "journal", "p", lambda group: None)
            first = journal.append(JournalEntry("t", b"k", b"before"))
            assert first is not None
            journal.wait(first)
            fill_disk(mount)
            big = journal.append(JournalEntry("t", b"k", b"x" * 200_000))
            assert big is not None
            with pytest.raises(OSError, match="No space left"):
                journal.wait(big)
            assert journal.append(JournalEntry("t", b"k", b"after")) is None
            journal.close()
            [path] = left_journals(mount / "journal")
            assert path.stat().st_size == len(frame(JournalEntry("t", b"k", b"before")))
            assert read_journal(path) == [JournalEntry("t", b"k", b"before")]


class TestRecovery:
    def test_a_crashed_publishers_journal_goes_in_front_of_the_spool_in_stream_order(
        self, tmp_path: Path
    ) -> None:
        topic = "t.turn-events"
        spool = DiskSpool(tmp_path)
        spool.append(topic, b"s-1", encode(turn("s-1", 5)))
        spool.close()
        journal = Journal(tmp_path / "journal", "crashed", lambda group: None)
        for sequence in (3, 1, 2):  # as a purge might have left them
            ticket = journal.append(JournalEntry(topic, b"s-1", encode(turn("s-1", sequence))))
            assert ticket is not None
            journal.wait(ticket)
        journal.close()  # never discarded: the process was killed
        with (left_journals(tmp_path / "journal")[0]).open("ab") as fh:
            fh.write(frame(JournalEntry(topic, b"s-1", b"torn"))[:-3])
        assert recover_journal(tmp_path, 1 << 20, topic, shipped_position_reader()) == 3
        assert left_journals(tmp_path / "journal") == []
        again = DiskSpool(tmp_path)
        read = shipped_position_reader()
        assert [read(r.message.value) for r in again.read()] == [1, 2, 3, 5]
        assert again.pending_by_topic[topic] == 4
        assert all(isinstance(r.message, SpooledMessage) for r in again.read())

    def test_no_journal_recovers_nothing(self, tmp_path: Path) -> None:
        assert recover_journal(tmp_path, 1 << 20, "t", shipped_position_reader()) == 0


class TestSetting:
    @pytest.mark.parametrize(
        ("raw", "on"), [("1", True), ("yes", True), ("0", False), ("off", False), ("", False)]
    )
    def test_the_environment_turns_it_on_or_off(
        self, monkeypatch: pytest.MonkeyPatch, raw: str, on: bool
    ) -> None:
        monkeypatch.setenv(JOURNAL_ENV, raw)
        assert journal_from_env() is on

    def test_anything_else_is_one_clear_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(JOURNAL_ENV, "maybe")
        with pytest.raises(ConfigurationError, match="TURNAUDIT_PUBLISH_JOURNAL='maybe'"):
            journal_from_env()


@settings(max_examples=30, deadline=None)
@given(waiting=st.integers(1, 6), closed=st.booleans())
def test_what_waits_for_a_commit_is_handed_over_ahead_of_an_append_the_journal_refuses(
    waiting: int, closed: bool
) -> None:
    """The journal stops taking appends (its disk failed, or it closed) while earlier ones
    wait for their commit: the refused append's own hand-over comes after theirs, in
    journal order (a data key record ahead of the turn sealed under it)."""
    lock = threading.Lock()
    handed: list[str] = []
    stuck, fail = threading.Event(), threading.Event()

    def hand_over(turn: str, _key: bytes, _value: bytes, _ticket: int | None) -> None:
        handed.append(turn)

    with tempfile.TemporaryDirectory() as tmp:
        mode = JournalMode(Path(tmp), "p-1", hand_over, lock)

        def blocked_then_failing(*_args: object) -> None:
            stuck.set()
            fail.wait(10)
            raise OSError(5, "Input/output error")

        mode.journal._write = blocked_then_failing  # type: ignore[method-assign]  # the disk, failing
        with lock:
            tickets = [mode.append(JournalEntry("t", b"k", b"v"), f"w{n}") for n in range(waiting)]
        assert None not in tickets
        assert stuck.wait(10)
        fail.set()
        deadline = time.monotonic() + 10
        while mode.journal._error is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert mode.journal._error is not None
        if closed:
            mode.journal._closed = True
        with lock:
            refused = mode.append(JournalEntry("t", b"k", b"v"), "last")
            assert refused is None
            handed.append("last")  # the publisher hands over what the journal refused
        assert handed == [f"w{n}" for n in range(waiting)] + ["last"]
        mode.close()
