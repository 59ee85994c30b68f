"""The heads file beside the spool: written off the turn's path, read back
after a crash at any byte (a torn tail is cut back, never a crash on start)."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.producers.heads import (
    FLUSH_SLICE_S,
    HEADS_FILE,
    HeadsFile,
    head_line,
    read_heads,
)
from turnaudit.stream_heads import HeadAnnouncement, StreamHead, decode_announcement

heads_st = st.lists(
    st.tuples(
        st.sampled_from(["s1", "s2", "s3"]),
        st.sampled_from(["p", "p.1"]),
        st.integers(0, 10**6),
        st.sampled_from(["", "general", "pack-\u00e9"]),  # "": a line written before packs
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(heads=heads_st, cut=st.integers(0, 10**5), ended=st.booleans())
def test_a_file_cut_at_any_byte_reads_back_its_whole_lines(
    tmp_path_factory: object, heads: list[tuple[str, str, int, str]], cut: int, ended: bool
) -> None:
    lines = [b'{"header":1,"producer_id":"p","interval_ms":200}\n']
    lines += [head_line(StreamHead(s, p, q, f"h{q}"), k, k and "rt") for s, p, q, k in heads]
    if ended:
        lines.append(b'{"ended":1}\n')
    data = b"".join(lines)
    cut = min(cut, len(data))
    path = Path(str(tmp_path_factory.mktemp("h"))) / HEADS_FILE  # type: ignore[attr-defined]  # hypothesis' fixture is untyped
    path.write_bytes(data[:cut])
    recorded = read_heads(path)  # never raises
    whole = data[:cut].count(b"\n")
    assert recorded.lines == whole
    expected: dict[tuple[str, str], int] = {}
    labels: dict[tuple[str, str], tuple[str, str]] = {}
    for s, p, q, k in heads[: max(0, whole - 1)]:
        expected[(s, p)] = q
        labels[(s, p)] = (k, k and "rt")
    assert {k: h.sequence for k, h in recorded.heads.items()} == expected
    assert recorded.labels == labels
    assert recorded.ended == (ended and cut == len(data))


def test_garbage_reads_as_no_heads(tmp_path: Path) -> None:
    path = tmp_path / HEADS_FILE
    for content in (b"", b"\x00\xff\n", b"[1,2]\n", b'{"s":1}\n', b"not json at all"):
        path.write_bytes(content)
        assert read_heads(path).heads == {}
    assert read_heads(tmp_path / "absent").heads == {}


def test_heads_are_written_by_their_thread_and_a_predecessor_is_kept_for_announcing(
    tmp_path: Path,
) -> None:
    lock = threading.Lock()
    first = HeadsFile(
        tmp_path, producer_id="p1", interval_s=0.01, lock=lock, announcer=None, prefix="u."
    )
    with lock:
        first.dirty[("s1", "p1")] = (0, "h0", "general", "chat")
        first.dirty[("s1", "p1")] = (1, "h1", "general", "chat")
        first.dirty[("s2", "p1")] = (0, "g0", "finance", "chat")
    first.write_now()
    recorded = read_heads(tmp_path / HEADS_FILE)
    assert {k: h.sequence for k, h in recorded.heads.items()} == {("s1", "p1"): 1, ("s2", "p1"): 0}
    assert recorded.labels == {("s1", "p1"): ("general", "chat"), ("s2", "p1"): ("finance", "chat")}
    assert not recorded.ended
    # A crash (no close): the successor renames the file, to announce it as cut.
    first._closing.set()
    second = HeadsFile(
        tmp_path, producer_id="p2", interval_s=0.01, lock=lock, announcer=None, prefix="u."
    )
    pending = second.pending_files()
    assert len(pending) == 1
    assert read_heads(pending[0]).producer_id == "p1"
    assert not second.announce_pending()  # no broker: kept, retried later
    assert pending[0].exists()
    with lock:
        second.dirty[("s3", "p2")] = (4, "k4", "general", "chat")
    second.close(timeout=0.1)
    assert read_heads(tmp_path / HEADS_FILE).ended  # kept, ended: a successor announces it


def test_an_announcement_round_trips_and_junk_is_none() -> None:
    note = HeadAnnouncement(StreamHead("s", "p", 7, "abc"), False, 200, "p2")
    assert decode_announcement(note.encode()) == note
    labelled = HeadAnnouncement(
        StreamHead("s", "p", 7, "abc"), False, 200, "p", open=True, pack="general", runtime="chat"
    )
    assert decode_announcement(labelled.encode()) == labelled
    assert note.key() == b"s\x00p"
    for junk in (None, b"", b"{}", b"[]", b'{"session_id":1}', "x"):
        assert decode_announcement(junk) is None


class SilentCluster:
    """An announcer whose cluster never answers: every flush waits out its timeout (or until
    the test releases it) with the announcements still queued."""

    def __init__(self) -> None:
        self.flushes: list[tuple[str, float]] = []  # (the waiting thread's name, timeout)
        self.released = threading.Event()
        self.waiting = threading.Event()

    def produce(self, *args: object, **kwargs: object) -> None:
        pass

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        self.flushes.append((threading.current_thread().name, timeout))
        self.waiting.set()
        self.released.wait(timeout)
        return 1


def test_close_ends_the_threads_wait_for_a_cluster_that_does_not_answer(tmp_path: Path) -> None:
    """A predecessor's heads, pending while the cluster is away: the thread waits for it in
    slices, so close() stops that wait at once instead of after the thread's 10 s; the heads
    stay pending for the next publisher. close()'s own announcement keeps close's timeout."""
    (tmp_path / HEADS_FILE).write_bytes(
        b'{"header":1,"producer_id":"p1","interval_ms":10}\n'
        + head_line(StreamHead("s1", "p1", 3, "h3"))
    )
    cluster = SilentCluster()
    heads = HeadsFile(
        tmp_path,
        producer_id="p2",
        interval_s=0.01,
        lock=threading.Lock(),
        announcer=cluster,  # type: ignore[arg-type]  # the announcer's produce and flush
        prefix="u.",
    )
    assert cluster.waiting.wait(30), "the thread never announced the pending heads"
    closer = threading.Thread(target=heads.close, kwargs={"timeout": 0.3})
    closer.start()
    closer.join(30)  # a deadlock guard: the silent cluster is released only after this
    cluster.released.set()
    assert not closer.is_alive()
    assert len(heads.pending_files()) == 1  # not announced: kept for the next publisher
    by_thread = [t for name, t in cluster.flushes if name == "turnaudit-heads"]
    by_close = [t for name, t in cluster.flushes if name == closer.name]
    assert by_thread
    assert max(by_thread) <= FLUSH_SLICE_S
    assert by_close
    assert FLUSH_SLICE_S < max(by_close) <= 0.3
